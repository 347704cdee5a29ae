"""JSONata states offline: LocalStack's JVM bridge on the machine's JRE and the jars the install fetched.

LocalStack evaluates JSONata (``QueryLanguage: JSONata``, and the JSONata Choice/Assign forms) in
a JVM through JPype, with ``com.dashjoin:jsonata`` 0.9.7 and jackson 2.16.2
(``localstack.services.stepfunctions.packages.JSONataPackageInstaller``). At the first JSONata
expression it downloads both: the jars from Maven Central and an Eclipse Temurin Java 21 from
api.adoptium.net / github.com, into ``FILESYSTEM_ROOT`` (wiped at every start). The JRE download
is not reachable here, so every JSONata state failed with ``States.Runtime`` ("Installation of
JSONataLibs 0.9.7 failed").

Nothing in the jars needs Java 21: jsonata 0.9.7's classes are Java 11 class files (major 55),
jackson's older. ``tools/install.sh`` puts the four jars (checked against pinned SHA-256s) in
``$VSA_JSONATA_LIBS`` and makes sure a JRE >= 11 is installed (Debian's openjdk-17-jre-headless);
``tools/localcloud.sh`` passes its home as ``VSA_JAVA_HOME``. This patch points the installer at
both, so no download is attempted. Pinned by tests/localcloud/test_jsonata.py.
"""

import logging
import os
from typing import Any

from localstack.utils.patch import patch

LOG = logging.getLogger(__name__)


def install() -> None:
    libs, java_home = os.environ.get("VSA_JSONATA_LIBS"), os.environ.get("VSA_JAVA_HOME")
    if not libs or not java_home:
        LOG.warning("VSA_JSONATA_LIBS or VSA_JAVA_HOME unset: JSONata states will try to download Java")
        return
    from localstack.services.stepfunctions.packages import JSONataPackageInstaller

    @patch(JSONataPackageInstaller.get_installed_dir)
    def _get_installed_dir(fn: Any, self: Any) -> str:
        return libs

    @patch(JSONataPackageInstaller.get_java_home)
    def _get_java_home(fn: Any, self: Any) -> str:
        return java_home
