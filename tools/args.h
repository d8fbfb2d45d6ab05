/*
 * args.h - the tools' command lines as tables.  An option is one line: its spellings, how
 * its value is read and where the value goes; the tools keep their own loops (and so their
 * own messages for an unknown flag or a missing value), and every integer goes through
 * inc_parse_arg, so a refused one reads alike in every tool.
 */
#ifndef INCMOE_TOOLS_ARGS_H
#define INCMOE_TOOLS_ARGS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    INC_ARG_INT,  /* an int in lo..hi */
    INC_ARG_U64,  /* a uint64_t in lo..hi (0 <= lo) */
    INC_ARG_SIZE, /* a size_t of bytes in lo..hi, with an optional K, M, G or T suffix */
    INC_ARG_TEXT, /* a const char *: the value itself */
    INC_ARG_SET,  /* no value: the int becomes lo */
    INC_ARG_HELP, /* no value: the caller prints its usage */
    INC_ARG_ZIPF, /* a double: "uniform" as 0, "zipf:S" as S (0 < S <= 100): --route's value */
    INC_ARG_FN,   /* fn reads the value */
} inc_arg_kind_t;

typedef struct {
    const char *flag;  /* "-n" or "--iters" */
    const char *alias; /* a second spelling ("--iters" beside "-n"), or NULL */
    inc_arg_kind_t kind;
    long long lo, hi; /* INT, U64, SIZE: the allowed range; SET: the value stored */
    void *dst;        /* where the value goes (FN: what fn is given) */
    /* INC_ARG_FN: reads text, the value of the option spelled `flag`; 0, or -1 after saying
       why on stderr. */
    int (*fn)(void *dst, const char *flag, const char *text);
} inc_arg_t;

/* The option of the table spelled `spelling`, or NULL. */
const inc_arg_t *inc_arg_find(const inc_arg_t *args, size_t n, const char *spelling);

/* Reads text into a's destination (SET and HELP ignore it; HELP stores nothing).  `spelled`
   is the flag as the user wrote it, for the message.  0, or -1 after saying why on stderr as
   "PROG: bad value 'TEXT' for FLAG: WHY" (FN: as fn says it). */
int inc_arg_read(const char *prog, const inc_arg_t *a, const char *spelled, const char *text);

/* The collective algorithms by the names every tool (and INCMOE_ALGO) gives them: the
   incmoe_algo_t value of "inc", "ring" or "a2a", or -1 for any other text. */
int inc_arg_algo(const char *text);
#define INC_ARG_ALGO_NAMES "inc, ring or a2a"
/* The name of an incmoe_algo_t value, "unknown" for another. */
const char *inc_arg_algo_name(int algo);
/* The algorithms inc_arg_algo knows: the values 0 .. count - 1. */
int inc_arg_algo_count(void);

/* text as a whole number 0..2^64-1 (decimal, 0x hex or 0 octal, no sign): 0, or -1. */
int inc_arg_u64(const char *text, uint64_t *out);

/* text as a whole number x with lo < x <= hi: 0, or -1. */
int inc_arg_double(const char *text, double lo, double hi, double *out);

/*
 * The whole command line through getopt_long: an option spelled "-x" is a short option,
 * "--name" a long one (abbreviations and "--name=VALUE" as getopt_long allows).  Messages
 * name an option by its flag.  0 when every option was read; 1 at a HELP option; -1 after a
 * value was refused (said); -2 after getopt_long refused an option or a missing value (it
 * said why; the caller shows its usage).  At most 64 options.
 */
int inc_arg_getopt(const char *prog, const inc_arg_t *args, size_t n, int argc, char **argv);

#endif
