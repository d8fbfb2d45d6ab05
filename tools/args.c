/* args.c - the tools' option tables (see args.h). */
#include "args.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "incmoe/incmoe.h"

#define ARG_MAX 64

static const char *const arg_algo_names[] = {
    [INCMOE_ALGO_INC] = "inc",
    [INCMOE_ALGO_RING] = "ring",
    [INCMOE_ALGO_A2A] = "a2a",
};
#define ARG_NALGOS ((int)(sizeof(arg_algo_names) / sizeof(arg_algo_names[0])))

int inc_arg_algo(const char *text)
{
    for (int a = 0; a < ARG_NALGOS; a++)
        if (strcmp(text, arg_algo_names[a]) == 0)
            return a;
    return -1;
}

const char *inc_arg_algo_name(int algo)
{
    return algo >= 0 && algo < ARG_NALGOS ? arg_algo_names[algo] : "unknown";
}

int inc_arg_algo_count(void)
{
    return ARG_NALGOS;
}

const inc_arg_t *inc_arg_find(const inc_arg_t *args, size_t n, const char *spelling)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(args[i].flag, spelling) == 0 ||
            (args[i].alias != NULL && strcmp(args[i].alias, spelling) == 0))
            return &args[i];
    return NULL;
}

int inc_arg_read(const char *prog, const inc_arg_t *a, const char *spelled, const char *text)
{
    long long v;
    switch (a->kind) {
    case INC_ARG_INT:
        if (inc_parse_arg(prog, spelled, text, a->lo, a->hi, 0, &v) != 0)
            return -1;
        *(int *)a->dst = (int)v;
        return 0;
    case INC_ARG_U64:
        if (inc_parse_arg(prog, spelled, text, a->lo, a->hi, 0, &v) != 0)
            return -1;
        *(uint64_t *)a->dst = (uint64_t)v;
        return 0;
    case INC_ARG_SIZE:
        if (inc_parse_arg(prog, spelled, text, a->lo, a->hi, 1, &v) != 0)
            return -1;
        *(size_t *)a->dst = (size_t)v;
        return 0;
    case INC_ARG_TEXT:
        *(const char **)a->dst = text;
        return 0;
    case INC_ARG_SET:
        *(int *)a->dst = (int)a->lo;
        return 0;
    case INC_ARG_HELP:
        return 0;
    case INC_ARG_ZIPF:
        if (strcmp(text, "uniform") == 0) {
            *(double *)a->dst = 0;
            return 0;
        }
        if (strncmp(text, "zipf:", 5) == 0 && inc_arg_double(text + 5, 0, 100, a->dst) == 0)
            return 0;
        fprintf(stderr, "%s: bad value '%s' for %s: want uniform or zipf:S with 0 < S <= 100\n",
                prog, text, spelled);
        return -1;
    case INC_ARG_FN:
        return a->fn(a->dst, spelled, text);
    }
    return -1;
}

int inc_arg_u64(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (end == text || *end != '\0' || errno != 0 || text[0] == '-')
        return -1;
    *out = v;
    return 0;
}

int inc_arg_double(const char *text, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !(v > lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

/* getopt_long's view of one spelling: a short option into optstring, a long one into longopts
   with val 256 + the option's index. */
static void getopt_add(const inc_arg_t *a, int index, const char *spelling, char *optstring,
                       struct option *longopts, int *nlong)
{
    int has_arg = a->kind != INC_ARG_SET && a->kind != INC_ARG_HELP;
    if (spelling == NULL)
        return;
    if (spelling[1] != '-') {
        size_t len = strlen(optstring);
        optstring[len++] = spelling[1];
        if (has_arg)
            optstring[len++] = ':';
        optstring[len] = '\0';
        return;
    }
    longopts[(*nlong)++] =
        (struct option){spelling + 2, has_arg ? required_argument : no_argument, NULL, 256 + index};
}

/* The option getopt_long answered c for. */
static const inc_arg_t *getopt_option(const inc_arg_t *args, size_t n, int c)
{
    if (c >= 256)
        return &args[c - 256];
    for (size_t i = 0; i < n; i++)
        if ((args[i].flag[1] == c && args[i].flag[2] == '\0') ||
            (args[i].alias != NULL && args[i].alias[1] == c && args[i].alias[2] == '\0'))
            return &args[i];
    return NULL;
}

int inc_arg_getopt(const char *prog, const inc_arg_t *args, size_t n, int argc, char **argv)
{
    char optstring[3 * ARG_MAX + 1] = "";
    struct option longopts[2 * ARG_MAX + 1];
    int nlong = 0, c;
    if (n > ARG_MAX) {
        fprintf(stderr, "%s: internal error: %zu options, at most %d\n", prog, n, ARG_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        getopt_add(&args[i], (int)i, args[i].flag, optstring, longopts, &nlong);
        getopt_add(&args[i], (int)i, args[i].alias, optstring, longopts, &nlong);
    }
    longopts[nlong] = (struct option){NULL, 0, NULL, 0};
    while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        const inc_arg_t *a = getopt_option(args, n, c);
        if (a == NULL)
            return -2; /* '?': getopt_long said why */
        if (a->kind == INC_ARG_HELP)
            return 1;
        if (inc_arg_read(prog, a, a->flag, optarg) != 0)
            return -1;
    }
    return 0;
}
