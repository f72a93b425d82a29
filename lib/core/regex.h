/*
 * Regular expressions that come from users (CRD schema patterns, log
 * policies, `det ... logs --grep`), compiled with glibc's regcomp after a
 * check that bounds what regcomp may build.
 *
 * glibc expands each repetition by copying the repeated tree (a+ becomes
 * aa*, a{3} aaa), so repetitions stacked on each other or nested grow
 * exponentially: 24 "+" in a row took gigabytes in one call. The check
 * refuses what Go's regexp (kube-apiserver's, and Determined's for log
 * policies) refuses too: a repetition operator right after another (only
 * the non-greedy "?" may follow one), a repeat count over 1000, and groups
 * nested more than 1000 deep; and an expression whose expansion would pass
 * KD_REGEX_MAX_NODES. That bounds regcomp (10,000 nodes: a few MB, a few
 * ms) and regexec too, which is linear in the text but walks the expanded
 * expression: 100,000 nodes took 4 s over a 20 KB string, 10,000 a tenth.
 */
#ifndef KD_CORE_REGEX_H
#define KD_CORE_REGEX_H

#include <regex.h>

#define KD_REGEX_MAX_NODES 10000 /* glibc tree nodes after expanding repetitions */
#define KD_REGEX_MAX_REPEAT 1000 /* as Go's regexp */
#define KD_REGEX_MAX_DEPTH 1000  /* groups within groups, as Go's regexp */

/**
 * Check `ere` (POSIX extended syntax) as above. 0 when regcomp may be
 * given it; KD_EINVAL with the reason in err (KD_ERRLEN bytes, or NULL)
 * otherwise.
 */
int kd_regex_check(const char *ere, char *err);

/**
 * kd_regex_check, then regcomp(re, ere, cflags). 0: compiled (regfree
 * it); KD_EINVAL with the reason (the check's or regerror's) in err.
 */
int kd_regcomp(regex_t *re, const char *ere, int cflags, char *err);

#endif
