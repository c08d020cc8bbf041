#!/usr/bin/env bash
# Checks that the repository stands on its own: no tracked file points at documents or an
# issue tracker a clone does not contain (the rules live in docs/rules.md), no line reads
# like a work log ("stop N", "the issue"), and every citation of a docs/rules.md or
# docs/api.md section names an anchor that exists.
#
# Shipped SQL migrations (crates/*/migrations/*.sql) are left out: sqlx keeps a checksum of
# every applied migration, so editing one, even a comment, breaks existing databases
# (docs/rules.md#references).
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
excluded=(':(exclude)crates/*/migrations/*.sql' ':(exclude)scripts/check-repo.sh')

# Documents outside the repository, and "issue 12"-style references to a tracker.
pattern='behaviour\.md|api-v1\.md|\.\./shar[e]d|shar[e]d/spec|[Ii]ssues? #?[0-9]+'
if offending=$(git grep -nIE "$pattern" -- . "${excluded[@]}"); then
    echo "check-repo: these lines refer to something outside the repository." >&2
    echo "Cite a section of docs/rules.md (or another file of the repository), or state" >&2
    echo "the rule or finding itself:" >&2
    echo "$offending" >&2
    status=1
fi

# Work-log words: "stop 52" (a step of a session) anywhere, and "the issue" anywhere but
# CHANGELOG.md, which may say what changed. Whole words only, any case: "the issuer",
# "the issues" and "nonstop" pass.
word_start='(^|[^[:alnum:]_])'
word_end='([^[:alnum:]_]|$)'
stop_step="${word_start}stop [0-9]+${word_end}"
the_issue="${word_start}the issue${word_end}"
offending=$(
    {
        git grep -nIiE "$stop_step" -- . "${excluded[@]}" || true
        git grep -nIiE "$the_issue" -- . "${excluded[@]}" ':(exclude)CHANGELOG.md' || true
    } | sort -u
)
if [[ -n $offending ]]; then
    echo "check-repo: these lines read like a work log (\"stop N\", \"the issue\")." >&2
    echo "Say what the code or document does, and why, in its own words:" >&2
    echo "$offending" >&2
    status=1
fi

# Citations such as docs/rules.md#pause must name an anchor of that file: an explicit
# <a id="…"> or a heading's slug.
anchors_of() {
    local file=$1
    {
        grep -oE '<a id="[^"]+"' "$file" | sed -E 's/<a id="([^"]+)"/\1/'
        grep -E '^#+ ' "$file" | sed -E 's/^#+ +//' | tr '[:upper:]' '[:lower:]' |
            sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
    } | sort -u
}
for doc in docs/rules.md docs/api.md; do
    [[ -f $doc ]] || continue
    known=$(anchors_of "$doc")
    name=${doc#docs/}
    # "docs/rules.md#a, #b": the first anchor after the file name, and any that follow it
    # in the same parenthesis or list ("#b"), are citations of that file.
    while IFS=: read -r file line text; do
        cited=$(grep -oE "$name#[a-z0-9_-]+((,| and)? #[a-z0-9_-]+)*" <<<"$text" |
            grep -oE '#[a-z0-9_-]+' | tr -d '#') || true
        for anchor in $cited; do
            if ! grep -qxF "$anchor" <<<"$known"; then
                echo "check-repo: $file:$line cites $doc#$anchor, which $doc does not define" >&2
                status=1
            fi
        done
    done < <(git grep -nIE "$name#" -- . "${excluded[@]}" || true)
    # Links inside the document itself: [text](#anchor).
    while IFS=: read -r line text; do
        for anchor in $(grep -oE '\]\(#[a-z0-9_-]+\)' <<<"$text" | sed -E 's/^\]\(#//; s/\)$//'); do
            if ! grep -qxF "$anchor" <<<"$known"; then
                echo "check-repo: $doc:$line links to #$anchor, which it does not define" >&2
                status=1
            fi
        done
    done < <(grep -nE '\]\(#' "$doc" || true)
done

if [[ $status -eq 0 ]]; then
    echo "check-repo: no references outside the repository, no work-log words; every cited section exists"
fi
exit $status
