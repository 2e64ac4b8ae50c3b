/*
 * cli/cli.h - what the files of the dvar command share: the command table,
 * exit codes, table-driven option parsing, error reporting, progress, JSON
 * output, value formatting, walking a slice in bounded pieces and .npy files.
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

/* "dvar <cmd>: <message>" plus "See 'dvar help <cmd>'."; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

/* "dvar <cmd>: <message>" on stderr; returns CLI_EXIT_RUNTIME. */
int cli_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

/* cli_error with the message of dvar_error_last(). */
int cli_error_dvar(const char *cmd);

/* The message of dvar_error_last(), or its code's name when it has none. */
const char *cli_dvar_message(void);

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

/* ------------------------------------------------------------------ JSON */

#define CLI_JSON_MAX_DEPTH 16

/* A streaming writer of one compact JSON document, ended by a newline. */
typedef struct {
	FILE *f;
	int depth;
	char closer[CLI_JSON_MAX_DEPTH];
	unsigned char nonempty[CLI_JSON_MAX_DEPTH];
} cli_json;

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

/* ----------------------------------------------------------------- walk */

/*
 * Walks a slice in row-major pieces of at most max_elems elements: the dims
 * before `axis` advance one index at a time, `axis` in runs, the dims after
 * it whole. Concatenated, the pieces are the slice in row-major order.
 */
typedef struct {
	dvar_slice region;
	int axis;
	int64_t run;
	int64_t idx[DVAR_MAX_RANK]; /* offsets into region of the next piece */
	int done;
} cli_walk;

/* Bytes a command holds for one piece, all its buffers together. */
#define CLI_PIECE_BYTES (64u << 20)

/*
 * Elements per piece when each costs bytes_per_elem of buffers: the budget
 * is CLI_PIECE_BYTES, or $DVAR_CLI_PIECE_BYTES (a testing knob).
 */
uint64_t cli_walk_budget(size_t bytes_per_elem);
void cli_walk_init(cli_walk *w, const dvar_slice *region, uint64_t max_elems);
/* The next piece and its element count; 0 when the walk is over. */
int cli_walk_next(cli_walk *w, dvar_slice *piece, uint64_t *num_elems);

/* ------------------------------------------------------------ sharding */

#define CLI_KIND_SHARDED "sharded" /* DVAR_STORE_ATTR_KIND of a sharded variable */
#define CLI_KIND_PLAIN "plain"     /* ... and of one merged into a single shard */
#define CLI_LAYOUT_DIV "div"       /* DVAR_SHARDING_ATTR_LAYOUT */
/* Threads of the readers and writers of reshard and export: each holds a
 * chunk buffer or two, so this bounds their memory. */
#define CLI_STREAM_THREADS 4

/* 1 when variable i is sharded: saved as more than one slice, or kind=sharded. */
int cli_var_is_sharded(const dvar_reader *r, size_t i);

/*
 * The div layout of want shards over shape's rows (capped by the rows; a
 * scalar gets one shard): *offsets (malloc'ed, n + 1 entries) and *n.
 * Returns CLI_EXIT_OK or an exit code after reporting.
 */
int cli_layout(const char *cmd, const char *name, const dvar_shape *shape, int64_t want,
               int64_t **offsets, int64_t *n);

/* Shard k of a layout: rows [offsets[k], offsets[k+1]) of shape, every column. */
void cli_shard_slice(const dvar_shape *shape, const int64_t *offsets, int64_t k, dvar_slice *out);

/* kind=sharded, shards=n, layout=div on name when n > 1; nothing for n <= 1. */
int cli_set_shard_attrs(dvar_writer *w, const char *name, int64_t n);

/*
 * Copy variable i's attributes from r to name in w. n = 0 keeps them all as
 * they are; n >= 1 (the variable is rewritten as n div shards) drops the old
 * layout's (shards, layout, kind=sharded) and sets n's (cli_set_shard_attrs;
 * for n = 1 a kind=sharded becomes kind=plain, as dvar_save writes a
 * one-shard variable). Returns a dvar status.
 */
int cli_copy_attrs(const dvar_reader *r, size_t i, dvar_writer *w, const char *name, int64_t n);

/* Reads regions of variables in bounded pieces into one reused buffer. */
typedef struct {
	const char *cmd;
	void *buf;
	uint64_t cap;
	cli_progress *pr; /* may be NULL */
	uint64_t done;    /* bytes handed on so far, for progress */
	uint64_t total;
} cli_copier;

void cli_copier_init(cli_copier *c, const char *cmd, cli_progress *pr, uint64_t total);
void cli_copier_free(cli_copier *c);

/* A sink for pieces, in row-major order; returns an exit code. */
typedef int (*cli_piece_fn)(void *ctx, const void *data, uint64_t bytes);

/* Read region of variable i in row-major pieces of at most 8 MiB, handing each to fn. */
int cli_copy_pieces(cli_copier *c, dvar_reader *r, size_t i, int dtype, const dvar_slice *region,
                    cli_piece_fn fn, void *ctx);

/* Write region of variable i (described by v) as one streamed slice of the same variable in w. */
int cli_copy_region(cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                    dvar_writer *w, const dvar_slice *region);

/* min(online CPUs, CLI_STREAM_THREADS). */
int cli_stream_threads(void);

/*
 * How reshard and export start: OUT must not exist (else an error asking for
 * a new `what`: "directory", "path"), then IN is opened with
 * cli_stream_threads() threads. Returns CLI_EXIT_OK with *r, or an exit code
 * after reporting.
 */
int cli_open_in_out(const char *cmd, const char *in, const char *out, const char *what,
                    dvar_reader **r);

/* What cli_each_var does with variable i of r (v describes it): copy what it
 * wants through c, into w when there is one. Returns an exit code. */
typedef int (*cli_var_fn)(void *ctx, cli_copier *c, dvar_reader *r, size_t i,
                          const dvar_var_info *v, dvar_writer *w);

/*
 * fn for every variable of r in order until one fails, with a progress line
 * (progress as cli_progress_init's mode) over the total bytes fn copies. With
 * w, w is committed once every call succeeded: a failure leaves nothing at
 * its path. Returns an exit code.
 */
int cli_each_var(const char *cmd, dvar_reader *r, dvar_writer *w, int progress, uint64_t total,
                 cli_var_fn fn, void *ctx);

/*
 * A new checkpoint at out, written from r by cli_each_var: chunks of
 * chunk_size raw bytes (0: the default), compressed as compress, with
 * cli_stream_threads() threads. Returns an exit code.
 */
int cli_rewrite(const char *cmd, dvar_reader *r, const char *out, uint64_t chunk_size,
                dvar_compress compress, int progress, uint64_t total, cli_var_fn fn, void *ctx);

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
 * TF2's object-based checkpoint key shortened for --short-names (malloc'ed;
 * NULL when out of memory): a trailing "/.ATTRIBUTES/VARIABLE_VALUE" goes,
 * "/.OPTIMIZER_SLOT/" becomes '@' and any other "/.ATTRIBUTES/" ':'.
 * "x/.ATTRIBUTES/VARIABLE_VALUE" -> "x";
 * "dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE" ->
 * "dense/kernel@optimizer/m"; "table/.ATTRIBUTES/table-keys" ->
 * "table:table-keys". Other names come back as they are.
 */
char *cli_short_name(const char *name);

/*
 * Find variable name: its full name, or with short_names set the one
 * variable whose short name it is. Returns CLI_EXIT_OK with *out, or an
 * exit code after reporting (not found; a short name without
 * --short-names, saying what it would name; a short name of several).
 */
int cli_find_var(const char *cmd, const dvar_reader *r, const char *name, int short_names,
                 size_t *out);

/*
 * String tensor i (n elements) read whole: *lens (n lengths) and *bytes
 * (the elements back to back, *total bytes), both malloc'ed. Returns
 * CLI_EXIT_OK, or an exit code after reporting.
 */
int cli_read_strings(const char *cmd, dvar_reader *r, size_t i, uint64_t n, uint64_t **lens,
                     char **bytes, uint64_t *total);

/* n bytes in double quotes, C-escaped: printable ASCII as it is but for \" and
 * \\, then \n \r \t, every other byte \xNN (always two hex digits). */
void cli_print_cstring(FILE *f, const void *p, uint64_t n);

/* TensorFlow's `checkpoint` state file (CheckpointState, text format). */
typedef struct {
	char *latest;  /* model_checkpoint_path */
	char **all;    /* all_model_checkpoint_paths, in order */
	size_t num_all;
} cli_tf_state;

/*
 * Read dir/checkpoint: 1 with *out filled, 0 when there is none, -1 with a
 * message in err when it cannot be read or parsed. Paths come as written
 * (relative ones are relative to dir).
 */
int cli_tf_state_read(const char *dir, cli_tf_state *out, char *err, size_t cap);
void cli_tf_state_clear(cli_tf_state *s);

/* ------------------------------------------------------------------ npy */

/* A .npy file mapped read-only: its header parsed, data pointing into the mapping. */
typedef struct {
	int dtype;
	dvar_shape shape;
	const void *data;
	uint64_t data_bytes;
	uint64_t trailing; /* bytes after the array data (ignored) */
	void *map;
	size_t map_len;
} cli_npy;

/*
 * Map and check path. On failure returns -1 with a message naming the file
 * in err (and nothing left mapped).
 */
int cli_npy_open(cli_npy *out, const char *path, char *err, size_t cap);
void cli_npy_close(cli_npy *n);

/* The .npy descr of dtype ("<f4"); NULL for bfloat16, which numpy lacks. */
const char *cli_npy_descr(int dtype);

/* Write a v1.0 header padded to a multiple of 64 bytes, as numpy does. */
int cli_npy_write_header(FILE *f, const char *descr, const dvar_shape *shape);

#endif
