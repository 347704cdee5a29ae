#!/usr/bin/env bash
# report-paths (host): this host's paths to every subsystem of the array, read only
# (`nvme list-subsys -o json` and sysfs), as the JSON report connect-path and disconnect-path
# end with, plus what is mounted from each subsystem (the mounts file): a volume a host has
# mounted is not removed from the array unless forced. The health check's fresh view of the
# hosts between path changes.
#
# Parameters (shell variables from the rendered document's prologue): ARRAY_ID VOLUMES
# SYSFS_ROOT NVME_COMMAND MOUNTS_FILE.
DOCUMENT=report-paths
# vsa:include lib/common.sh
# vsa:include lib/host-paths.sh

SYSFS=$(absolute "$SYSFS_ROOT")
MOUNTS=$(absolute "$MOUNTS_FILE") # what is mounted from each subsystem ("mounts")
IFS=, read -r -a VOLS <<<"$VOLUMES"
NQNS=()
for volume in "${VOLS[@]}"; do NQNS+=("$(subsystem_nqn "$ARRAY_ID" "$volume")"); done

list_paths
paths_report "$LISTING" "${NQNS[@]}"
printf '{"document":"%s","arrayId":%s,"subsystems":[%s],"livePaths":%s,"observedAt":%s}\n' \
  "$DOCUMENT" "$(json "$ARRAY_ID")" "$SUBSYSTEMS_JSON" "$LIVE_TOTAL" "$(json "$LISTED_AT")"
