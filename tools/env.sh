# Shared settings for the project's scripts (sourced, not run).
VSA_ROOT="${VSA_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export VSA_STATE="${VSA_STATE:-$VSA_ROOT/.localcloud}"
export VSA_LOCALCLOUD_PORT="${VSA_LOCALCLOUD_PORT:-4566}"
export VSA_LOCALCLOUD_URL="http://127.0.0.1:${VSA_LOCALCLOUD_PORT}"
# Clients (SAM CLI, tests, demo) talk to the local cloud with throw-away credentials.
