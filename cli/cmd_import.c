/*
 * cli/cmd_import.c - `dvar import`: a committed checkpoint from .npy, .npz
 * and .safetensors files, through dvar_import, which checks every file
 * before it writes, streams the data and leaves nothing at OUT when it
 * fails or is interrupted.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *out_path;
static cli_args pairs;
static int no_compress;
static const char *compress = "auto";
static uint64_t chunk_size;
static int64_t step = -1;
static int64_t keep = -1;
static cli_args shard_opts;
static int progress = -1;
static int quiet;
static int force;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "OUT", NULL, &out_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint directory to create, which must not exist (see\n"
	  "--force); with --step, a checkpoint root" },
	{ CLI_OPT_ARGS, "NAME=FILE.npy", NULL, &pairs, 0, CLI_OPT_REQUIRED,
	  "save the array in FILE.npy as the variable NAME. FILE.npz or\n"
	  "FILE.safetensors alone saves every array it holds under its own\n"
	  "name; PREFIX=FILE.npz (or .safetensors) as PREFIX/name" },
	{ CLI_OPT_STRING, "compress", "MODE", &compress, 0, 0,
	  "auto (default): lz4 where a sample says it saves >= 10% and runs\n"
	  "faster than the disk; lz4: wherever it saves >= 10%; none: raw" },
	{ CLI_OPT_SWITCH, "no-compress", NULL, &no_compress, 1, 0,
	  "the same as --compress none: every chunk raw (page-aligned,\nzero-copy readable)" },
	{ CLI_OPT_BYTES, "chunk-size", "BYTES", &chunk_size, 0, 0,
	  "raw bytes per chunk: a multiple of 4K from 4K to 1G (default 4M)" },
	{ CLI_OPT_INT, "step", "N", &step, 0, 0,
	  "write OUT/ckpt-N under the root OUT and make it the latest" },
	{ CLI_OPT_LIST, "shards", "NAME=N", &shard_opts, 0, 0,
	  "save array NAME as a sharded variable of N shards (div layout\n"
	  "along the first axis; attributes kind=sharded, shards, layout).\n"
	  "Repeatable" },
	{ CLI_OPT_INT, "keep", "K", &keep, 0, 0,
	  "with --step: keep the K latest checkpoints, delete older ones\n(0 keeps all)" },
	{ CLI_OPT_SWITCH, "force", NULL, &force, 1, 0,
	  "replace an existing OUT (not with --step): the new one is written\n"
	  "fully first, then swapped in, and only then the old one removed" },
	CLI_WRITE_PROGRESS_OPTS(&quiet, &progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Files are told apart by their first bytes. .npz archives may hold stored\n"
	"(np.savez) or deflated (np.savez_compressed) members. Arrays must be C-order\n"
	"and little-endian (or byte-order-free): bool, int8-64, uint8-64, float16,\n"
	"float32 or float64, of rank 0 to 8, and bfloat16 from safetensors (BF16);\n"
	"numpy has no bfloat16. --shards NAME=N splits the rows as TensorFlow's div\n"
	"rule does (N capped by the rows; one shard is a plain variable). The data\n"
	"is streamed: memory stays at a few chunks whatever the files' sizes.\n"
	"Nothing is left at OUT when the import fails or is interrupted.",
	NULL
};

/* 1 when name ends in suffix. */
static int ends_with(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Each NAME=FILE, or FILE.npz / FILE.safetensors alone, as a source; a NAME
 * given twice is refused. Usage errors, before any I/O. */
static int split_pairs(dvar_import_source *srcs)
{
	for (int i = 0; i < pairs.n; i++) {
		char *arg = pairs.v[i], *eq = strchr(arg, '=');
		if (!eq && (ends_with(arg, ".npz") || ends_with(arg, ".safetensors"))) {
			srcs[i].path = arg;
			continue;
		}
		if (!eq || eq == arg || eq[1] == '\0')
			return cli_usage_error("import", "'%s' is not NAME=FILE.npy, FILE.npz or "
			                                 "FILE.safetensors", arg);
		*eq = '\0';
		srcs[i].name = arg;
		srcs[i].path = eq + 1;
		for (int j = 0; j < i; j++)
			if (srcs[j].name && strcmp(srcs[j].name, arg) == 0)
				return cli_usage_error("import", "variable '%s' is given twice", arg);
	}
	return 0;
}

/* Each --shards NAME=N; the library checks that NAME is an imported array. */
static int split_shards(dvar_shard_count *counts)
{
	for (int k = 0; k < shard_opts.n; k++) {
		char *text = shard_opts.v[k], *eq = strrchr(text, '='), *end;
		if (!eq || eq == text || eq[1] < '0' || eq[1] > '9')
			return cli_usage_error("import", "--shards '%s' is not NAME=N", text);
		long long n = strtoll(eq + 1, &end, 10);
		if (*end || n > INT32_MAX)
			return cli_usage_error("import", "--shards '%s': N must be a whole number", text);
		if (n < 1)
			return cli_usage_error("import", "--shards '%s': N must be at least 1", text);
		*eq = '\0';
		for (int j = 0; j < k; j++)
			if (strcmp(counts[j].name, text) == 0)
				return cli_usage_error("import", "--shards gives '%s' twice", text);
		counts[k].name = text;
		counts[k].shards = n;
	}
	return 0;
}

static int check_options(dvar_import_options *o)
{
	int rc;

	if (no_compress)
		o->compress = DVAR_COMPRESS_NONE;
	else if ((rc = cli_parse_compress("import", compress, &o->compress)) != 0)
		return rc;
	if (force && step >= 0)
		return cli_usage_error("import", "--force replaces OUT, which with --step is a root of "
		                                 "other checkpoints: give one of them");
	if (keep >= 0 && step < 0)
		return cli_usage_error("import", "--keep needs --step");
	if (keep > INT32_MAX)
		return cli_usage_error("import", "--keep %lld is too large", (long long)keep);
	o->step = step;
	o->keep_last = keep > 0 ? (int)keep : 0;
	o->chunk_size = chunk_size;
	return cli_check_chunk_size("import", chunk_size);
}

int cmd_import(int argc, char **argv)
{
	dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
	cli_op op;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if ((rc = check_options(&o)) != 0)
		return rc;
	dvar_import_source *srcs = calloc((size_t)pairs.n, sizeof(*srcs));
	dvar_shard_count *counts = calloc((size_t)shard_opts.n + 1, sizeof(*counts));
	if (!srcs || !counts) {
		rc = cli_error("import", "out of memory");
		goto done;
	}
	if ((rc = split_pairs(srcs)) != 0 || (rc = split_shards(counts)) != 0)
		goto done;
	o.shards = counts;
	o.num_shards = (size_t)shard_opts.n;
	cli_output out = { out_path, out_path, NULL, 0 };
	if (step < 0 && (rc = cli_output_begin(&out, "import", out_path, 0, force)) != 0)
		goto done;
	cli_op_begin(&op, &o.cb, "import", progress, quiet);
	rc = cli_op_finish(&op, &out, dvar_import(out.target, srcs, (size_t)pairs.n, &o));
done:
	free(counts);
	free(srcs);
	return rc;
}
