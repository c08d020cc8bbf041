#!/usr/bin/env bash
# The real mail clients tests/email_check_ins.rs sends with: Debian's swaks, python3 (its
# smtplib) and openssl (a test certificate for STARTTLS). Installed when missing; fails
# loudly when they cannot be.
set -euo pipefail
missing=()
command -v swaks >/dev/null 2>&1 || missing+=(swaks)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing ${missing[*]} (Debian packages) for the e-mail check-in tests" >&2
    if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
        "${sudo[@]}" apt-get update -qq
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    }
fi
for tool in swaks python3 openssl; do
    command -v "$tool" >/dev/null 2>&1 || { echo "cannot install $tool" >&2; exit 1; }
done
