/*
 * cli/cli.h - what the files of the dvar command share: the command table,
 * exit codes, table-driven option parsing, error reporting, progress, JSON
 * output, value formatting, progress and callbacks of library operations.
 * Private to cli/; the command uses only the public API in include/dvar/.
 */
#ifndef DVAR_CLI_H
#define DVAR_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "dvar/dvar.h"

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* Exit codes, documented in `dvar help` and every command's --help. */
#define CLI_EXIT_OK 0
#define CLI_EXIT_CHECK 1   /* verify found corruption, diff found differences */
#define CLI_EXIT_USAGE 2
#define CLI_EXIT_RUNTIME 3

/* ------------------------------------------------------------- commands */

/* argv[0] is the command's name; returns an exit code. */
typedef int (*cli_cmd_fn)(int argc, char **argv);

typedef struct {
	const char *name;
	cli_cmd_fn fn;
	const char *desc;
} cli_cmd;

/* The command table (main.c); NULL when name is not a command. */
const cli_cmd *cli_cmd_find(const char *name);

int cmd_import(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_reshard(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_digest(int argc, char **argv);

/* -------------------------------------------------------------- options */

typedef enum {
	CLI_OPT_END = 0,
	CLI_OPT_ARG,    /* a positional argument: const char *target */
	CLI_OPT_ARGS,   /* the remaining positionals: cli_args target */
	CLI_OPT_SWITCH, /* --name: stores value in int target */
	CLI_OPT_STRING, /* --name VALUE: const char *target */
	CLI_OPT_INT,    /* --name N, N >= 0: int64_t target */
	CLI_OPT_BYTES,  /* --name BYTES, with an optional K/M/G suffix: uint64_t target */
	CLI_OPT_REAL,   /* --name X, finite and >= 0: double target */
	CLI_OPT_LIST    /* --name VALUE, repeatable: cli_args target, in order */
} cli_opt_kind;

#define CLI_OPT_REQUIRED 1u /* a positional that must be given */

/*
 * One entry of a command's option table, which drives both parsing and
 * --help. Positionals are named by their placeholder ("PATH"), options by
 * their long name without the dashes ("chunk-size").
 */
typedef struct {
	cli_opt_kind kind;
	const char *name;
	const char *value_name; /* placeholder of an option's value ("BYTES") */
	void *target;
	int value;              /* what a CLI_OPT_SWITCH stores */
	unsigned flags;
	const char *help;
} cli_opt;

/* CLI_OPT_ARGS's target: the positionals, in order (they point into argv).
 * Also CLI_OPT_LIST's: the values given, in order (v is malloc'ed, kept until exit). */
typedef struct {
	char **v;
	int n;
} cli_args;

/* A command's help: its table plus the text after the option list. */
typedef struct {
	const cli_opt *opts;
	const char *details; /* paragraphs after the options; may be NULL */
	const char *check;   /* what exit code 1 means for it; NULL when unused */
} cli_usage;

/* --progress / --no-progress, for the commands that take long. */
#define CLI_PROGRESS_OPTS(target) \
	{ CLI_OPT_SWITCH, "progress", NULL, (target), 1, 0, \
	  "show progress on stderr even when it is not a terminal" }, \
	{ CLI_OPT_SWITCH, "no-progress", NULL, (target), 0, 0, "never show progress" }

/* The commands that write a checkpoint: --quiet, and the progress switches. */
#define CLI_WRITE_PROGRESS_OPTS(quiet, progress) \
	{ CLI_OPT_SWITCH, "quiet", NULL, (quiet), 1, 0, \
	  "no progress and no summary line (on a terminal, a successful run\n" \
	  "ends with one: what was written, how many variables and bytes, how\n" \
	  "long it took)" }, \
	CLI_PROGRESS_OPTS(progress)

/* Returned by cli_parse when the command should go on. */
#define CLI_CONTINUE (-1)

/*
 * Parse argv (argv[0] is the command) against u->opts. Returns CLI_CONTINUE,
 * or an exit code: CLI_EXIT_OK after printing --help, CLI_EXIT_USAGE after
 * reporting a usage error. Positionals are moved to the front of argv.
 */
int cli_parse(const cli_usage *u, int argc, char **argv);

/* --compress MODE: auto, lz4 or none as *out. Returns 0, or CLI_EXIT_USAGE after reporting. */
int cli_parse_compress(const char *cmd, const char *text, dvar_compress *out);

/* --chunk-size BYTES: 0 (not given) or a multiple of 4096 up to 1 GiB. Returns 0, or
 * CLI_EXIT_USAGE after reporting. */
int cli_check_chunk_size(const char *cmd, uint64_t bytes);

/* ------------------------------------------------------------- reporting */

/*
 * Errors go to stderr and, in --json mode, into the JSON error document with
 * "code": "usage" for a usage error, the dvar_code's name ("DVAR_ENOTFOUND")
 * for one the library reported, "runtime" for any other.
 */

/* "dvar <cmd>: <message>" plus "See 'dvar help <cmd>'."; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

/* "dvar <cmd>: <message>" on stderr; returns CLI_EXIT_RUNTIME. */
int cli_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

/* cli_error with the message of dvar_error_last(). */
int cli_error_dvar(const char *cmd);

/* The message of dvar_error_last(), or its code's name when it has none. */
const char *cli_dvar_message(void);

/* ------------------------------------------------------------ "did you mean" */

#define CLI_SUGGEST_MAX 3

/* The names nearest to what the user typed: case-insensitive edit distance, at
 * most a third of its length (a name differing only in case is nearest). */
typedef struct {
	const char *typed;
	const char *names[CLI_SUGGEST_MAX];
	int n;
	size_t dist;
} cli_suggest;

void cli_suggest_init(cli_suggest *s, const char *typed);
/* Consider name, measured by compared (the name, or another form of it). */
void cli_suggest_add(cli_suggest *s, const char *name, const char *compared);
/* "; did you mean 'a' or 'b'?" with prefix before each name ("--"), or ""
 * when nothing is near. Returns buf. */
const char *cli_suggest_text(const cli_suggest *s, const char *prefix, char *buf, size_t cap);

/* "512 B", "1.5 KiB", "3.0 GiB". */
void cli_format_bytes(char *buf, size_t cap, uint64_t bytes);

/*
 * v with the fewest significant digits that read back as the same value
 * (as a float when single is set); "nan", "inf" and "-inf" as numpy prints.
 */
void cli_format_real(char *buf, size_t cap, double v, int single);

/* One element of dtype at p, as numpy prints it (True/False for bool). */
void cli_format_elem(char *buf, size_t cap, int dtype, const void *p);

/* -------------------------------------------------------------- progress */

/* A progress line on stderr, drawn with '\r' at most ~6 times a second. */
typedef struct {
	const char *label;
	uint64_t total;  /* shown when an update's total is 0 (unknown to the caller) */
	int enabled;
	int eager;      /* forced with --progress: draw from the first update */
	double start;
	double last;
	size_t width;   /* length of the line on screen, 0 when none */
} cli_progress;

/*
 * mode: 1 forced on, 0 off, -1 when stderr is a terminal. Progress is never
 * drawn when quiet is set (--json). In the automatic mode nothing appears
 * for operations that end within about a second.
 */
void cli_progress_init(cli_progress *p, const char *label, int mode, int quiet);

/* A dvar_progress_fn; userdata is the cli_progress. */
void cli_progress_update(void *userdata, uint64_t done, uint64_t total);

/* Erase the line if one was drawn. */
void cli_progress_end(cli_progress *p);

/* A writing command's run of a library operation (import, export, reshard). */
typedef struct {
	const char *cmd;
	cli_progress pr;
	uint64_t vars, bytes; /* written so far */
	double start;
	int quiet;
} cli_op;

/*
 * Fill cb for an operation of command cmd: progress on stderr (progress as
 * cli_progress_init's mode; none when quiet), notes printed as "dvar <cmd>:
 * note: ...", the variables written counted, and cancellation by Ctrl-C or
 * SIGTERM, after which the library removes what it wrote and fails with
 * DVAR_ECANCELED.
 */
void cli_op_begin(cli_op *op, dvar_callbacks *cb, const char *cmd, int progress, int quiet);



/* ------------------------------------------------------------------ JSON */

#define CLI_JSON_MAX_DEPTH 16

/* A streaming writer of one compact JSON document, ended by a newline. */
typedef struct {
	FILE *f;
	int depth;
	int failed; /* closed by cli_json_error: further writes are dropped */
	char closer[CLI_JSON_MAX_DEPTH];
	unsigned char nonempty[CLI_JSON_MAX_DEPTH];
} cli_json;

/* Set by cli_parse when the command was given --json: its errors then print a
 * JSON document on stdout too. */
extern int cli_json_mode;

/*
 * An error in --json mode: the document begun on stdout is closed (its open
 * arrays and objects ended) with "ok":false,"error":{"code","message"};
 * without one, {"schema_version":1,"ok":false,"error":{...}} is printed.
 * Only the first error of a run is printed, and nothing after a complete
 * document, so stdout always holds exactly one.
 */
void cli_json_error(const char *code, const char *message);

/* Begins the document's top-level object with {"schema_version":1. */
void cli_json_begin(cli_json *j, FILE *f);
/* Begins a top-level object without schema_version (files of other formats). */
void cli_json_begin_bare(cli_json *j, FILE *f);
/* 1 when s is valid UTF-8 (JSON strings carry it as it is), else 0. */
int cli_utf8_valid(const char *s);
/* key is NULL for an array element. */
void cli_json_object(cli_json *j, const char *key);
void cli_json_array(cli_json *j, const char *key);
/* Close the innermost object or array (the document after the last). */
void cli_json_end(cli_json *j);
/* value NULL writes null. */
void cli_json_str(cli_json *j, const char *key, const char *value);
void cli_json_u64(cli_json *j, const char *key, uint64_t v);
void cli_json_i64(cli_json *j, const char *key, int64_t v);
/* A non-finite v writes null. */
void cli_json_real(cli_json *j, const char *key, double v);
void cli_json_bool(cli_json *j, const char *key, int v);
void cli_json_dims(cli_json *j, const char *key, const int64_t *v, int n);
/* n bytes (a string tensor's element, NULs and all): a JSON string when they are
 * valid UTF-8, else {"base64":"..."}. */
void cli_json_bytes(cli_json *j, const char *key, const void *p, uint64_t n);
/* text as it is: a JSON value the caller formatted (a number, true, ...). */
void cli_json_raw(cli_json *j, const char *key, const char *text);

/* --------------------------------------------------------------- output */

/*
 * Where a writing command (import, export, reshard) writes OUT. An existing
 * OUT is refused unless force; with force the library writes target, a
 * temporary sibling, and cli_output_commit swaps it in for the old one,
 * which is removed only then. tf: OUT is a TensorFlow prefix, its files
 * OUT.index and OUT.data-00000-of-00001.
 */
typedef struct {
	const char *out;
	const char *target; /* what to hand the library: out, or tmp */
	char *tmp;          /* malloc'ed; NULL when OUT did not exist */
	int tf;
} cli_output;

/* Returns CLI_EXIT_OK, or an exit code after reporting (OUT exists, no force). */
int cli_output_begin(cli_output *o, const char *cmd, const char *out, int tf, int force);
/* After the library wrote target: the new output replaces the old. Returns an exit code. */
int cli_output_commit(cli_output *o, const char *cmd);
/* After the library failed (it leaves nothing at target). */
void cli_output_abort(cli_output *o);

/*
 * After the library call of op returned status: the new output committed
 * (or the error reported and the attempt abandoned), the progress line
 * ended and, after a success, one line on a terminal unless quiet ("dvar
 * export: wrote 'OUT': 9 variables, 1.2 MiB in 0.31 s"). Returns the exit code.
 */
int cli_op_finish(cli_op *op, cli_output *out, int status);

/* ----------------------------------------------------------------- walk */

/* Bytes a command holds for one piece, all its buffers together. */
#define CLI_PIECE_BYTES (64u << 20)

/*
 * Elements per piece when each costs bytes_per_elem of buffers: the budget
 * is CLI_PIECE_BYTES, or $DVAR_CLI_PIECE_BYTES (a testing knob).
 */
uint64_t cli_walk_budget(size_t bytes_per_elem);

/* ------------------------------------------------------------ TensorFlow */

/* Room for cli_dtype_text. */
#define CLI_DTYPE_TEXT_MAX 24

/*
 * How commands show a dtype: dvar_dtype_name's name, "string" for a TF
 * string tensor (DVAR_DTYPE_STRING), "dtype N" for a TensorFlow DataType
 * dvar has no type for. Returns buf.
 */
const char *cli_dtype_text(int dtype, char *buf, size_t cap);

/* 1 for a dvar_dtype (values dvar_reader_read can read), 0 otherwise. */
int cli_dtype_numeric(int dtype);

/* "dvar <cmd>: variable 'NAME' has dtype N, ..."; returns CLI_EXIT_RUNTIME. */
int cli_error_dtype(const char *cmd, const char *name, int dtype);

/*
 * Find variable name: its full name; else the one variable whose TF2 short
 * name it is; else, for a full TF key, the variable stored under its short
 * name (an export with --short-names). Returns CLI_EXIT_OK with *out, or an
 * exit code after reporting (not found, with the nearest names; a short
 * name of several variables).
 */
int cli_find_var(const char *cmd, const dvar_reader *r, const char *name, size_t *out);

/* n bytes in double quotes, C-escaped: printable ASCII as it is but for \" and
 * \\, then \n \r \t, every other byte \xNN (always two hex digits). */
void cli_print_cstring(FILE *f, const void *p, uint64_t n);

#endif
