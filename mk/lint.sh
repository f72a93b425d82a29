#!/usr/bin/env bash
# make lint: the committed .clang-format must hold for every C file, and
# the functions the house style bans must not appear.
set -u
cd "$(dirname "$0")/.."
rc=0
files=$(git ls-files '*.c' '*.h'; git ls-files --others --exclude-standard '*.c' '*.h')
files=$(printf '%s\n' $files | sort -u)
if [ "${1:-}" = "--fix" ]; then
    [ -n "$files" ] && clang-format -i $files
    echo "format: $(printf '%s\n' $files | wc -l) files"
    exit 0
fi
if [ -n "$files" ]; then
    if ! clang-format --dry-run --Werror $files 2> /tmp/kd-lint.$$; then
        grep -E '^[^ ].*: (error|warning):' /tmp/kd-lint.$$ | cut -d: -f1 | sort -u | sed 's/^/lint: not formatted (run make format): /'
        rc=1
    fi
    rm -f /tmp/kd-lint.$$
    # strtok, strcpy, sprintf, atoi, gets, system and the non-reentrant time functions.
    banned='\b(strtok|strcpy|strcat|sprintf|vsprintf|atoi|atol|gets|system|gmtime|localtime|ctime|asctime)\('
    if grep -nE "$banned" $files | grep -v 'lint:allow'; then
        echo "lint: banned function above (use the _r variant, snprintf, kd_strlcpy or kd_parse_*)"
        rc=1
    fi
fi
[ $rc -eq 0 ] && echo "lint: ok ($(printf '%s\n' $files | wc -l) files)"
exit $rc
