/*
 * Quantity parsing for the scheduler: a decimal number with an optional
 * binary (Ki..Ei) or decimal (m, k, M, G, T, P, E, eN) suffix.
 */
#include "quantity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/str.h"

int kd_quantity_parse_milli(const char *s, int64_t *milli, char *err)
{
    int rc = 0;
    if (s == NULL || s[0] == '\0' || strlen(s) > 64) {
        rc = kd_seterr(err, KD_EINVAL,
                       "quantity \"%s\": expected a number with an optional "
                       "suffix such as 500m, 2, 128Mi or 1G",
                       s != NULL ? s : "");
        goto out;
    }
    const char *p = s;
    if (*p == '+')
        p++;
    const char *num_end = p;
    while ((*num_end >= '0' && *num_end <= '9') || *num_end == '.')
        num_end++;
    if (num_end == p) {
        rc = kd_seterr(err, KD_EINVAL, "quantity \"%s\": must start with a non-negative number", s);
        goto out;
    }
    char num[65];
    memcpy(num, p, (size_t)(num_end - p));
    num[num_end - p] = '\0';
    double v;
    if (kd_parse_double(num, &v) < 0) {
        rc = kd_seterr(err, KD_EINVAL, "quantity \"%s\": \"%s\" is not a number", s, num);
        goto out;
    }
    static const struct {
        const char *suffix;
        double mult;
    } sfx[] = {
        {"", 1},
        {"m", 1e-3},
        {"k", 1e3},
        {"M", 1e6},
        {"G", 1e9},
        {"T", 1e12},
        {"P", 1e15},
        {"E", 1e18},
        {"Ki", 1024.0},
        {"Mi", 1048576.0},
        {"Gi", 1073741824.0},
        {"Ti", 1099511627776.0},
        {"Pi", 1125899906842624.0},
        {"Ei", 1152921504606846976.0},
    };
    double mult = -1;
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        if (strcmp(num_end, sfx[i].suffix) == 0)
            mult = sfx[i].mult;
    }
    if (mult < 0 && (num_end[0] == 'e' || num_end[0] == 'E')) {
        int e;
        if (kd_parse_int(num_end + 1, &e) == 0 && e >= -3 && e <= 18)
            mult = pow(10, e);
    }
    if (mult < 0) {
        rc = kd_seterr(err, KD_EINVAL, "quantity \"%s\": unknown suffix \"%s\"", s, num_end);
        goto out;
    }
    double m = ceil(v * mult * 1000.0 - 1e-6);
    if (m > 9.2e18) {
        rc = kd_seterr(err, KD_EINVAL, "quantity \"%s\": too large", s);
        goto out;
    }
    *milli = (int64_t)m;
out:
    return rc;
}
