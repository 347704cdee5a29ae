#!/usr/bin/env bash
# report-exports (controller): what nvmet exports for the array, read only (configfs), as the
# `exports` of configure-target's report. The health check's fresh view of the controllers
# between configure-target runs.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID CONFIGFS_ROOT.
DOCUMENT=report-exports
# vsa:include lib/common.sh
NVMET=$(absolute "$CONFIGFS_ROOT")/nvmet
# vsa:include lib/target-exports.sh

PREFIX=$(subsystem_prefix "$ARRAY_ID")
exports_json
printf '{"document":"%s","arrayId":%s,"exports":[%s]}\n' "$DOCUMENT" "$(json "$ARRAY_ID")" "$EXPORTS_JSON"
