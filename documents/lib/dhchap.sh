#!/usr/bin/env bash
# Shared by the documents that handle DH-HMAC-CHAP keys (configure-target, connect-path), after
# lib/common.sh: reading the array's secret with the AWS CLI on the instance, taking keys out of
# it, and keeping them out of everything that is shown.
# A key never reaches a command line, a parameter, stdout, stderr or the report: the secret is
# read with the AWS CLI into a shell variable, handed to python3 and to the kernel through pipes
# and bash builtins (printf, $(<file)), and any text that is shown passes through redact first.
redact() { # the text with every DHHC-1 key replaced (an nvme-cli or AWS CLI message, say)
  printf '%s' "$1" | sed -E 's/DHHC-1:[0-9]{2}:[A-Za-z0-9+\/=]*:?/DHHC-1:<redacted>/g'
}
read_secret() { # read_secret ID: the SecretString of the secret ID into SECRET (AWS_COMMAND's CLI)
  local errors status=0
  errors=$(mktemp) || fail "cannot create a temporary file"
  SECRET=$("$AWS_COMMAND" secretsmanager get-secret-value --secret-id "$1" \
    --query SecretString --output text 2>"$errors") || status=$?
  if ((status != 0)); then
    local said
    said=$(redact "$(tail -n 3 "$errors")")
    rm -f "$errors"
    fail "cannot read the secret $1 with '$AWS_COMMAND secretsmanager get-secret-value' (exit $status): ${said//$'\n'/ }"
  fi
  rm -f "$errors"
}
# python3 reads the secret's JSON on stdin (documents/lib/dhchap_secret.py: its docstring says how).
# vsa:python DHCHAP_SECRET_PY lib/dhchap_secret.py
secret_keys() { # secret_keys ID NAME...: the keys NAME (a/b: b inside a) of SECRET, into KEYS[NAME]
  local source=$1 output name value status=0
  shift
  output=$(printf '%s' "$SECRET" | python3 -c "$DHCHAP_SECRET_PY" keys "$source" "$@" 2>&1) || status=$?
  ((status == 0)) || fail "$(redact "${output//$'\n'/ }")"
  declare -gA KEYS=()
  while read -r name value; do
    [[ -n $name ]] && KEYS[$name]=$value
  done < <(printf '%s\n' "$output") # a pipe: a here-string may be a temporary file
}
secret_has() { # secret_has NAME: SECRET has an entry NAME (a/b: b inside a), whatever it holds
  # (not JSON: no; secret_keys then fails naming why)
  local found
  found=$(printf '%s' "$SECRET" | python3 -c "$DHCHAP_SECRET_PY" has "$1") ||
    fail "cannot read the secret's JSON with python3"
  [[ $found == yes ]]
}
