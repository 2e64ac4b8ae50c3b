/*
 * cli/cmd_ls.c - `dvar ls`: the committed checkpoints under a root, in step
 * order, with what the root's `checkpoint` file says of each (latest, kept).
 */
#include <inttypes.h>

#include "cli.h"

static const char *root;
static int json;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "ROOT", NULL, &root, 0, CLI_OPT_REQUIRED, "a checkpoint root" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"MARKS: \"latest\" for the checkpoint the `checkpoint` file points to, \"kept\"\n"
	"for those it lists.\n"
	"--json prints {\"schema_version\":1,\"root\",\"checkpoints\":[{\"name\",\"step\",\n"
	"\"bytes\",\"latest\",\"kept\"}]}; step is null for a name without one.",
	NULL
};

int cmd_ls(int argc, char **argv)
{
	dvar_root_list *l = NULL;
	dvar_root_entry e;
	cli_json j;
	char size[32];
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	rc = CLI_EXIT_OK;
	if (dvar_root_list_open(&l, root) != DVAR_OK)
		return cli_error_dvar("ls");
	size_t n = dvar_root_list_count(l);
	if (json) {
		cli_json_begin(&j, stdout);
		cli_json_str(&j, "root", root);
		cli_json_array(&j, "checkpoints");
	} else if (n) {
		printf("%8s  %-20s  %10s  %s\n", "STEP", "NAME", "SIZE", "MARKS");
	} else {
		fprintf(stderr, "dvar ls: no checkpoints under '%s'\n", root);
	}
	for (size_t i = 0; i < n; i++) {
		if (dvar_root_list_get(l, i, &e) != DVAR_OK) {
			rc = cli_error_dvar("ls");
			break;
		}
		if (json) {
			cli_json_object(&j, NULL);
			cli_json_str(&j, "name", e.name);
			if (e.step >= 0)
				cli_json_i64(&j, "step", e.step);
			else
				cli_json_str(&j, "step", NULL);
			cli_json_u64(&j, "bytes", e.bytes);
			cli_json_bool(&j, "latest", e.is_latest);
			cli_json_bool(&j, "kept", e.is_kept);
			cli_json_end(&j);
			continue;
		}
		cli_format_bytes(size, sizeof(size), e.bytes);
		if (e.step >= 0)
			printf("%8" PRId64, e.step);
		else
			printf("%8s", "-");
		printf("  %-20s  %10s  %s%s%s\n", e.name, size, e.is_latest ? "latest" : "",
		       e.is_latest && e.is_kept ? "," : "", e.is_kept ? "kept" : "");
	}
	if (json) {
		/* Close the document even after a failed entry: the exit code tells. */
		cli_json_end(&j);
		cli_json_end(&j);
	}
	dvar_root_list_free(l);
	return rc;
}
