/*
 * cli/cmd_export.c - `dvar export IN OUT`: dvar_export with the command's
 * options. Every variable as one full tensor, for serving: a dvar checkpoint
 * (each variable mappable in place), one safetensors file, a TensorFlow
 * checkpoint (or, --keep-shards, its shards as TensorFlow slices), or a
 * directory of .npy files. The library writes OUT only when complete.
 */
#include <string.h>

#include "cli.h"

static const char *in_path;
static const char *out_path;
static int single_shard;
static int keep_shards;
static const char *format;
static cli_args drop;
static int drop_optimizer;
static int short_names;
static uint64_t chunk_size;
static int progress = -1;
static int quiet;
static int force;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "IN", NULL, &in_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint to read (a directory, or a root: its latest), or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_ARG, "OUT", NULL, &out_path, 0, CLI_OPT_REQUIRED,
	  "what to create: a checkpoint directory, a .safetensors file, a\n"
	  "TensorFlow checkpoint prefix (OUT.index, OUT.data-00000-of-00001)\n"
	  "or a directory of .npy files; it must not exist (see --force)" },
	{ CLI_OPT_SWITCH, "single-shard", NULL, &single_shard, 1, 0,
	  "merge every sharded variable into one full tensor (required for\n"
	  "--format dvar; --format tf takes it or --keep-shards)" },
	{ CLI_OPT_SWITCH, "keep-shards", NULL, &keep_shards, 1, 0,
	  "--format tf: a variable saved in several slices (sharded) as a\n"
	  "TensorFlow partitioned tensor, one slice per saved slice, the way\n"
	  "TensorFlow saves a ShardedVariable" },
	{ CLI_OPT_STRING, "format", "FORMAT", &format, 0, 0,
	  "dvar: a checkpoint with every chunk raw, each variable mappable in\n"
	  "place (dvar_reader_map); safetensors: one file; tf: a TensorFlow\n"
	  "checkpoint (TensorBundle) that TensorFlow reads; npy: a directory\n"
	  "of .npy files and manifest.json. Default: safetensors when OUT ends\n"
	  "in .safetensors, else dvar" },
	{ CLI_OPT_LIST, "drop-prefix", "PREFIX", &drop, 0, 0,
	  "leave out the variables whose name starts with PREFIX; a PREFIX no\n"
	  "variable has is an error. Repeatable" },
	{ CLI_OPT_SWITCH, "drop-optimizer", NULL, &drop_optimizer, 1, 0,
	  "leave out optimizer slots: TF1's <var>/Adam, <var>/Adam_1 (and the\n"
	  "other optimizers' slot names), TF2's keys with /.OPTIMIZER_SLOT/" },
	{ CLI_OPT_SWITCH, "short-names", NULL, &short_names, 1, 0,
	  "export TF2 keys under their short names:\n"
	  "x/.ATTRIBUTES/VARIABLE_VALUE as x" },
	{ CLI_OPT_BYTES, "chunk-size", "BYTES", &chunk_size, 0, 0,
	  "--format dvar: raw bytes per chunk, a multiple of 4K from 4K to 1G\n(default 4M)" },
	{ CLI_OPT_SWITCH, "force", NULL, &force, 1, 0,
	  "replace an existing OUT: the new one is written fully first,\n"
	  "then swapped in, and only then the old one removed" },
	CLI_WRITE_PROGRESS_OPTS(&quiet, &progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"In a dvar export a sharded variable loses its shards and layout attributes\n"
	"and kind=sharded becomes kind=plain; every other attribute is kept.\n"
	"safetensors and npy imply --single-shard.\n"
	"safetensors dtypes: F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32,\n"
	"U64, BOOL; variable names must be UTF-8 there, and the header's\n"
	"__metadata__ is {\"format\":\"pt\"}.\n"
	"\n"
	"--format npy writes NAME.npy per variable (characters other than\n"
	"A-Z a-z 0-9 . _ - as _, / as __) and manifest.json, which maps each\n"
	"variable's name to its file, dtype and shape; bfloat16 is written as\n"
	"float32 (exactly), numpy having no bfloat16.\n"
	"\n"
	"--format tf writes a TensorBundle whose keys are the variable names and\n"
	"whose dtypes are TensorFlow's same-numbered DataTypes; attributes are\n"
	"dropped (TensorFlow has no place for them). Give exactly one of\n"
	"--single-shard (one plain entry per variable, for serving) and\n"
	"--keep-shards (slices as saved; a variable saved whole stays one entry).\n"
	"String tensors of a TensorFlow IN (its object graph, vocabularies) are\n"
	"copied into a TensorFlow OUT as they are, and left out of the other\n"
	"formats with a note naming each.\n"
	"\n"
	"Memory stays at a few chunks whatever the variable sizes. Nothing is\n"
	"left at OUT when the export fails or is interrupted (Ctrl-C).",
	NULL
};

static int check_options(dvar_export_options *eo)
{
	int rc;

	if (!format)
		eo->format = DVAR_EXPORT_AUTO;
	else if (strcmp(format, "dvar") == 0)
		eo->format = DVAR_EXPORT_DVAR;
	else if (strcmp(format, "safetensors") == 0)
		eo->format = DVAR_EXPORT_SAFETENSORS;
	else if (strcmp(format, "tf") == 0)
		eo->format = DVAR_EXPORT_TF;
	else if (strcmp(format, "npy") == 0)
		eo->format = DVAR_EXPORT_NPY;
	else
		return cli_usage_error("export", "--format takes dvar, safetensors, tf or npy, not '%s'",
		                       format);
	if (eo->format == DVAR_EXPORT_TF) {
		if (single_shard && keep_shards)
			return cli_usage_error("export", "--single-shard and --keep-shards exclude each "
			                                 "other: give one");
		if (!single_shard && !keep_shards)
			return cli_usage_error("export", "--format tf needs --single-shard (every variable "
			                                 "one tensor) or --keep-shards (sharded variables "
			                                 "as TensorFlow slices)");
	} else {
		if (keep_shards)
			return cli_usage_error("export", "--keep-shards applies to --format tf only");
		/* safetensors and npy hold full tensors only: nothing else to choose. */
		size_t n = strlen(out_path);
		int st = eo->format == DVAR_EXPORT_SAFETENSORS ||
		         (eo->format == DVAR_EXPORT_AUTO && n >= 12 &&
		          strcmp(out_path + n - 12, ".safetensors") == 0);
		if (!single_shard && !st && eo->format != DVAR_EXPORT_NPY)
			return cli_usage_error("export", "export writes every variable as one full tensor: "
			                                 "give --single-shard");
	}
	if (chunk_size && format && eo->format != DVAR_EXPORT_DVAR)
		return cli_usage_error("export", "--chunk-size applies to --format dvar only");
	if ((rc = cli_check_chunk_size("export", chunk_size)) != 0)
		return rc;
	for (int k = 0; k < drop.n; k++)
		if (!drop.v[k][0])
			return cli_usage_error("export", "--drop-prefix '' would drop every variable");
	eo->flags = (keep_shards ? DVAR_EXPORT_KEEP_SHARDS : 0) |
	            (drop_optimizer ? DVAR_EXPORT_DROP_OPTIMIZER : 0) |
	            (short_names ? DVAR_EXPORT_SHORT_NAMES : 0);
	eo->drop_prefixes = (const char *const *)drop.v;
	eo->num_drop_prefixes = (size_t)drop.n;
	eo->chunk_size = chunk_size;
	return 0;
}

int cmd_export(int argc, char **argv)
{
	dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;
	cli_op op;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if ((rc = check_options(&eo)) != 0)
		return rc;
	cli_output out;
	if ((rc = cli_output_begin(&out, "export", out_path, eo.format == DVAR_EXPORT_TF, force)))
		return rc;
	cli_op_begin(&op, &eo.cb, "export", progress, quiet);
	rc = cli_op_finish(&op, &out, dvar_export(in_path, out.target, &eo));
	return rc;
}
