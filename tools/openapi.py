"""Write (or check) the API's OpenAPI document, generated from the handlers' routes (the arrays
API and the backups API: two functions behind one REST API, one document).

python tools/openapi.py           write openapi.json
python tools/openapi.py --check   exit 1 if openapi.json is not what the code generates
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "core"), str(ROOT / "functions")]

from api_arrays.handler import app  # noqa: E402
from api_backups.handler import app as backups_app  # noqa: E402

DOCUMENT = ROOT / "openapi.json"


def generate() -> str:
    schema = json.loads(
        app.get_openapi_json_schema(
            title="VSA control plane: arrays API",
            version="1",
            summary="Declare a Virtual Storage Array once; read its live state; delete it; back it up and "
            "restore it.",
            description=(
                "Requests are signed with AWS Signature Version 4 (service execute-api): the API uses "
                "IAM authorization. Errors answer {message} (400 invalid spec or request, 404 unknown "
                "array or backup set, 409 conflict: a concurrent apply, a bootstrap/drain in progress, "
                "maxControllers below the serving controllers, a backup set in progress, EBS snapshot "
                "limits) or 422 {detail} for a request that does not parse (422 {message} for an "
                "Idempotency-Key reused with another body)."
            ),
        )
    )
    # Every method takes only SigV4-signed requests (the API's DefaultAuthorizer is AWS_IAM): the
    # scheme API Gateway itself exports and imports for IAM authorization ("x-amazon-apigateway-
    # authtype", API Gateway developer guide, OpenAPI extensions)
    schema.setdefault("components", {})["securitySchemes"] = {
        "sigv4": {
            "type": "apiKey",
            "name": "Authorization",
            "in": "header",
            "x-amazon-apigateway-authtype": "awsSigv4",
            "description": "AWS Signature Version 4 for the execute-api service; the caller needs "
            "execute-api:Invoke on the method's ARN",
        }
    }
    schema["security"] = [{"sigv4": []}]
    backups = json.loads(backups_app.get_openapi_json_schema(title="backups", version="1"))
    schema["paths"].update(backups["paths"])
    for name, component in backups.get("components", {}).get("schemas", {}).items():
        schema.setdefault("components", {}).setdefault("schemas", {}).setdefault(name, component)
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> int:
    text = generate()
    if "--check" in sys.argv:
        if not DOCUMENT.exists() or DOCUMENT.read_text() != text:
            print("openapi.json is out of date: run `python tools/openapi.py` and commit it", file=sys.stderr)
            return 1
        return 0
    DOCUMENT.write_text(text)
    print(f"wrote {DOCUMENT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
