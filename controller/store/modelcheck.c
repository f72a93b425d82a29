/*
 * The model registry's decisions that need no database: the form of a
 * model's name, the checks of a list of labels, and how a list of models
 * is sorted. Pure, so that the API's request checks (and their fuzz
 * target) and the table tests use them without a server.
 */
#include <string.h>

#include "store/store.h"

bool kd_store_model_name_ok(const char *s)
{
    if (s == NULL || s[0] == '\0' || strlen(s) > KD_STORE_MODEL_MAX_NAME)
        return false;
    for (size_t i = 0; s[i] != '\0'; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return false;
    }
    return true;
}

int kd_store_model_labels_check(const json_t *labels, const char *field, char *err)
{
    size_t i;
    json_t *v;
    if (labels == NULL)
        return 0;
    if (!json_is_array(labels) || json_array_size(labels) > KD_STORE_MODEL_MAX_LABELS)
        return kd_seterr(err, KD_EINVAL, "%s: must be an array of at most %d labels", field,
                         KD_STORE_MODEL_MAX_LABELS);
    json_array_foreach(labels, i, v)
    {
        const char *l = json_string_value(v);
        size_t n = json_is_string(v) ? json_string_length(v) : 0;
        bool ok = n > 0 && n <= KD_STORE_MODEL_MAX_LABEL && strlen(l) == n;
        for (size_t j = 0; ok && j < n; j++)
            ok = (unsigned char)l[j] >= 0x20 && l[j] != 0x7f;
        if (!ok)
            return kd_seterr(
                err, KD_EINVAL,
                "%s[%zu]: must be a string of 1 to %d bytes without control characters", field, i,
                KD_STORE_MODEL_MAX_LABEL);
    }
    return 0;
}

int kd_store_model_sort_parse(const char *sort, const char *order, enum kd_model_sort *out,
                              bool *desc, char *err)
{
    static const char *const names[] = {"name", "created", "updated", "versions", NULL};
    int k = -1;
    for (int i = 0; names[i] != NULL && k < 0; i++)
        if (strcmp(sort != NULL ? sort : "name", names[i]) == 0)
            k = i;
    if (k < 0)
        return kd_seterr(err, KD_EINVAL,
                         "sort: must be \"name\", \"created\", \"updated\" or \"versions\"");
    *out = (enum kd_model_sort)k;
    if (order == NULL)
        *desc = *out != KD_MODEL_SORT_NAME;
    else if (strcmp(order, "asc") == 0 || strcmp(order, "desc") == 0)
        *desc = order[0] == 'd';
    else
        return kd_seterr(err, KD_EINVAL, "order: must be \"asc\" or \"desc\"");
    return 0;
}
