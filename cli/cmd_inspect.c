/*
 * cli/cmd_inspect.c - `dvar inspect`: what a checkpoint's index says of each
 * variable (dtype, shape, saved slices, raw and stored bytes, chunks,
 * attributes), as a table or as one JSON document. Reads no data file.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *path;
static int json;
static int short_names;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "PATH", NULL, &path, 0, CLI_OPT_REQUIRED,
	  "a checkpoint directory, a root with a `checkpoint` file, or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_SWITCH, "short-names", NULL, &short_names, 1, 0,
	  "show TF2 object-based names shortened: \"x/.ATTRIBUTES/VARIABLE_VALUE\"\n"
	  "as \"x\", \"v/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE\" as\n"
	  "\"v@opt/m\", any other \"/.ATTRIBUTES/\" as ':'" },
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Slices are in TensorFlow's slice text: one \"start,length\" or \"-\" (whole)\n"
	"per dimension, separated by ':'. RATIO is raw bytes over stored bytes.\n"
	"A variable's attributes follow its row, indented, as key=value (C escapes).\n"
	"A TensorFlow checkpoint's variables have TF's keys as names. Its string\n"
	"tensors (the object graph, vocabularies) show as dtype \"string\", their\n"
	"bytes as stored (lengths and checksum included); a TF dtype dvar has no\n"
	"type for shows as \"dtype N\" (TF's DataType number).\n"
	"--json prints {\"schema_version\":1,\"path\",\"variables\":[{\"name\",\"dtype\",\n"
	"\"shape\",\"slices\":[{\"start\",\"length\"}],\"raw_bytes\",\"stored_bytes\",\n"
	"\"num_chunks\",\"attributes\":{KEY:VALUE}}],\"raw_bytes\",\"stored_bytes\",\n"
	"\"num_chunks\"}; with --short-names each variable also has \"full_name\".",
	NULL
};

/* One variable's cells of the table, formatted. */
typedef struct {
	char dtype[CLI_DTYPE_TEXT_MAX], shape[200], raw[32], stored[32], ratio[16], chunks[24];
	char *short_name; /* --short-names: dvar_short_name's, for dvar_free */
} row;

/* Room for the slice text of the largest shape: 8 x "start,length:". */
#define SLICE_TEXT_MAX 400

static void format_ratio(char *buf, size_t cap, uint64_t raw, uint64_t stored)
{
	if (stored)
		snprintf(buf, cap, "%.2f", (double)raw / (double)stored);
	else
		snprintf(buf, cap, "-");
}

/* The saved slices of variable i, separated by spaces ("-" for a scalar). */
static int print_slices(dvar_reader *r, size_t i)
{
	char text[SLICE_TEXT_MAX];
	dvar_var_info v;
	dvar_slice sl;
	int rc = dvar_reader_var(r, i, &v);

	for (size_t j = 0; rc == DVAR_OK && j < v.num_slices; j++) {
		if ((rc = dvar_reader_var_slice(r, i, j, &sl)) != DVAR_OK)
			break;
		dvar_slice_format(&sl, &v.shape, text, sizeof(text));
		printf("%s%s", j ? " " : "", text[0] ? text : "-");
	}
	putchar('\n');
	return rc;
}

/* s with backslashes, spaces and control bytes escaped C-style (and '=' in
 * keys), so that each attribute is one key=value token on one line. */
static void print_escaped(const char *s, int is_key)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '\\')
			fputs("\\\\", stdout);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c < 0x20 || c == 0x7f || c == ' ' || (is_key && c == '='))
			printf("\\x%02x", c);
		else
			putchar(c);
	}
}

/* Variable i's attributes on their own indented line, when it has any. */
static int print_attrs(dvar_reader *r, size_t i)
{
	size_t n = dvar_reader_var_num_attrs(r, i);
	const char *key, *value;
	if (!n)
		return DVAR_OK;
	fputs("    ", stdout);
	for (size_t k = 0; k < n; k++) {
		int rc = dvar_reader_var_attr_at(r, i, k, &key, &value);
		if (rc != DVAR_OK)
			return rc;
		if (k)
			putchar(' ');
		print_escaped(key, 1);
		putchar('=');
		print_escaped(value, 0);
	}
	putchar('\n');
	return DVAR_OK;
}

static const char *const delta_kinds[] = { "full", "unchanged", "patched" };

/* A delta's own share of variable i, in JSON. */
static int json_delta(cli_json *j, dvar_reader *r, size_t i)
{
	dvar_var_delta d;
	if (dvar_reader_num_links(r) < 2)
		return DVAR_OK;
	if (dvar_reader_var_delta(r, i, &d) != DVAR_OK)
		return cli_error_dvar("inspect");
	cli_json_object(j, "delta");
	cli_json_str(j, "kind", delta_kinds[d.kind]);
	if (d.kind == DVAR_DELTA_PATCHED)
		cli_json_u64(j, "rows", d.rows);
	cli_json_u64(j, "raw_bytes", d.raw_bytes);
	cli_json_u64(j, "stored_bytes", d.stored_bytes);
	cli_json_end(j);
	return DVAR_OK;
}

/* The chain of a delta: each link, newest first, with its bytes and what it saves. */
static void print_chain(dvar_reader *r, cli_json *j)
{
	size_t n = dvar_reader_num_links(r);
	dvar_link_info li;
	char size[32];
	if (n < 2)
		return;
	if (j)
		cli_json_array(j, "chain");
	else
		printf("a delta: %zu checkpoints are read for it, this one first\n", n);
	for (size_t k = 0; k < n; k++) {
		if (dvar_reader_link(r, k, &li) != DVAR_OK)
			break; /* k < n: cannot happen */
		if (j) {
			cli_json_object(j, NULL);
			cli_json_str(j, "path", li.path);
			cli_json_bool(j, "delta", li.is_delta);
			cli_json_u64(j, "bytes", li.bytes);
			cli_json_u64(j, "whole", li.vars_whole);
			cli_json_u64(j, "unchanged", li.vars_unchanged);
			cli_json_u64(j, "patched", li.vars_patched);
			cli_json_end(j);
			continue;
		}
		cli_format_bytes(size, sizeof(size), li.bytes);
		printf("  %s  %s  %s: %zu whole, %zu unchanged, %zu patched\n", li.path,
		       li.is_delta ? "delta" : "full", size, li.vars_whole, li.vars_unchanged,
		       li.vars_patched);
	}
	if (j)
		cli_json_end(j);
}

static int print_json(dvar_reader *r)
{
	size_t n = dvar_reader_num_vars(r);
	uint64_t raw = 0, stored = 0, chunks = 0;
	char dtype[CLI_DTYPE_TEXT_MAX];
	dvar_var_info v;
	dvar_slice sl;
	cli_json j;

	cli_json_begin(&j, stdout);
	cli_json_str(&j, "path", dvar_reader_path(r));
	cli_json_array(&j, "variables");
	for (size_t i = 0; i < n; i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			return cli_error_dvar("inspect");
		char *shown = short_names ? dvar_short_name(v.name) : NULL;
		if (short_names && !shown)
			return cli_error("inspect", "out of memory");
		cli_json_object(&j, NULL);
		cli_json_str(&j, "name", shown ? shown : v.name);
		if (shown)
			cli_json_str(&j, "full_name", v.name);
		dvar_free(shown);
		cli_json_str(&j, "dtype", cli_dtype_text(v.dtype, dtype, sizeof(dtype)));
		cli_json_dims(&j, "shape", v.shape.dims, v.shape.rank);
		cli_json_array(&j, "slices");
		for (size_t s = 0; s < v.num_slices; s++) {
			if (dvar_reader_var_slice(r, i, s, &sl) != DVAR_OK)
				return cli_error_dvar("inspect");
			cli_json_object(&j, NULL);
			cli_json_dims(&j, "start", sl.start, sl.rank);
			cli_json_dims(&j, "length", sl.length, sl.rank);
			cli_json_end(&j);
		}
		cli_json_end(&j);
		cli_json_u64(&j, "raw_bytes", v.raw_bytes);
		cli_json_u64(&j, "stored_bytes", v.stored_bytes);
		cli_json_u64(&j, "num_chunks", v.num_chunks);
		cli_json_object(&j, "attributes");
		for (size_t k = 0; k < dvar_reader_var_num_attrs(r, i); k++) {
			const char *key, *value;
			if (dvar_reader_var_attr_at(r, i, k, &key, &value) != DVAR_OK)
				return cli_error_dvar("inspect");
			cli_json_str(&j, key, value);
		}
		cli_json_end(&j);
		if (json_delta(&j, r, i) != DVAR_OK)
			return CLI_EXIT_RUNTIME;
		cli_json_end(&j);
		raw += v.raw_bytes;
		stored += v.stored_bytes;
		chunks += v.num_chunks;
	}
	cli_json_end(&j);
	cli_json_u64(&j, "raw_bytes", raw);
	cli_json_u64(&j, "stored_bytes", stored);
	cli_json_u64(&j, "num_chunks", chunks);
	print_chain(r, &j);
	cli_json_end(&j);
	return CLI_EXIT_OK;
}

/* Column widths first, then the rows; the slices come last as they can be long. */
static int print_table(dvar_reader *r)
{
	size_t n = dvar_reader_num_vars(r);
	uint64_t raw = 0, stored = 0, chunks = 0;
	int w[7] = { 4, 5, 5, 3, 6, 5, 6 }; /* the headings' widths */
	row *rows = calloc(n ? n : 1, sizeof(*rows));
	const char **names = calloc(n ? n : 1, sizeof(*names));
	char traw[32], tstored[32], ratio[16];
	dvar_var_info v;
	int rc = DVAR_OK;

	if (!rows || !names) {
		free(rows);
		free(names);
		return cli_error("inspect", "out of memory");
	}
	for (size_t i = 0; i < n && rc == DVAR_OK; i++) {
		row *x = &rows[i];
		if ((rc = dvar_reader_var(r, i, &v)) != DVAR_OK)
			break;
		names[i] = v.name;
		if (short_names) {
			if (!(x->short_name = dvar_short_name(v.name))) {
				rc = DVAR_ENOMEM;
				break;
			}
			names[i] = x->short_name;
		}
		cli_dtype_text(v.dtype, x->dtype, sizeof(x->dtype));
		dvar_shape_format(&v.shape, x->shape, sizeof(x->shape));
		cli_format_bytes(x->raw, sizeof(x->raw), v.raw_bytes);
		cli_format_bytes(x->stored, sizeof(x->stored), v.stored_bytes);
		format_ratio(x->ratio, sizeof(x->ratio), v.raw_bytes, v.stored_bytes);
		snprintf(x->chunks, sizeof(x->chunks), "%zu", v.num_chunks);
		const char *cells[7] = { names[i], x->dtype, x->shape, x->raw, x->stored, x->ratio,
		                         x->chunks };
		for (int c = 0; c < 7; c++)
			if ((int)strlen(cells[c]) > w[c])
				w[c] = (int)strlen(cells[c]);
		raw += v.raw_bytes;
		stored += v.stored_bytes;
		chunks += v.num_chunks;
	}
	if (rc == DVAR_OK) {
		printf("%s\n", dvar_reader_path(r));
		printf("%-*s  %-*s  %-*s  %*s  %*s  %*s  %*s  SLICES\n", w[0], "NAME", w[1], "DTYPE",
		       w[2], "SHAPE", w[3], "RAW", w[4], "STORED", w[5], "RATIO", w[6], "CHUNKS");
	}
	for (size_t i = 0; i < n && rc == DVAR_OK; i++) {
		row *x = &rows[i];
		printf("%-*s  %-*s  %-*s  %*s  %*s  %*s  %*s  ", w[0], names[i], w[1], x->dtype,
		       w[2], x->shape, w[3], x->raw, w[4], x->stored, w[5], x->ratio, w[6], x->chunks);
		if ((rc = print_slices(r, i)) == DVAR_OK)
			rc = print_attrs(r, i);
	}
	if (rc == DVAR_OK) {
		cli_format_bytes(traw, sizeof(traw), raw);
		cli_format_bytes(tstored, sizeof(tstored), stored);
		format_ratio(ratio, sizeof(ratio), raw, stored);
		printf("%zu variable%s, %" PRIu64 " chunk%s, %s raw, %s stored, ratio %s\n", n,
		       n == 1 ? "" : "s", chunks, chunks == 1 ? "" : "s",
		       traw, tstored, ratio);
		print_chain(r, NULL);
	}
	for (size_t i = 0; i < n; i++)
		dvar_free(rows[i].short_name);
	free(rows);
	free(names);
	if (rc == DVAR_ENOMEM)
		return cli_error("inspect", "out of memory");
	return rc == DVAR_OK ? CLI_EXIT_OK : cli_error_dvar("inspect");
}

int cmd_inspect(int argc, char **argv)
{
	dvar_reader *r = NULL;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if (dvar_reader_open(&r, path, NULL) != DVAR_OK)
		return cli_error_dvar("inspect");
	rc = json ? print_json(r) : print_table(r);
	dvar_reader_free(r);
	return rc;
}
