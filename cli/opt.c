/*
 * cli/opt.c - table-driven option parsing: one cli_opt table per command
 * drives both the parser and the command's --help, so the two cannot drift.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int is_positional(const cli_opt *o)
{
	return o->kind == CLI_OPT_ARG || o->kind == CLI_OPT_ARGS;
}

static const cli_opt *find_option(const cli_usage *u, const char *name, size_t len);

/* "--chunk-size BYTES" or "OUT" or "NAME=FILE.npy..." as the help lists it. */
static size_t opt_label(const cli_opt *o, char *buf, size_t cap)
{
	if (o->kind == CLI_OPT_ARG)
		return (size_t)snprintf(buf, cap, "%s", o->name);
	if (o->kind == CLI_OPT_ARGS)
		return (size_t)snprintf(buf, cap, "%s...", o->name);
	if (o->value_name)
		return (size_t)snprintf(buf, cap, "--%s %s", o->name, o->value_name);
	return (size_t)snprintf(buf, cap, "--%s", o->name);
}

/* Print text indented by indent columns after each of its newlines. */
static void print_indented(const char *text, int indent)
{
	for (const char *p = text; *p; p++) {
		putchar(*p);
		if (*p == '\n')
			printf("%*s", indent, "");
	}
	putchar('\n');
}

static void print_help(const cli_usage *u, const char *cmd)
{
	const cli_cmd *c = cli_cmd_find(cmd);
	const cli_opt *o;
	int width = (int)strlen("-h, --help");
	int has_options = 0, has_args = 0;
	char label[128];

	for (o = u->opts; o->kind != CLI_OPT_END; o++) {
		int n = (int)opt_label(o, label, sizeof(label));
		if (n > width)
			width = n;
		if (is_positional(o))
			has_args = 1;
		else
			has_options = 1;
	}

	printf("usage: dvar %s", cmd);
	if (has_options)
		printf(" [options]");
	for (o = u->opts; o->kind != CLI_OPT_END; o++) {
		if (!is_positional(o))
			continue;
		const char *dots = o->kind == CLI_OPT_ARGS ? "..." : "";
		if (o->flags & CLI_OPT_REQUIRED)
			printf(" %s%s", o->name, dots);
		else
			printf(" [%s%s]", o->name, dots);
	}
	printf("\n\n%s.\n", c ? c->desc : cmd);

	if (has_args) {
		printf("\nArguments:\n");
		for (o = u->opts; o->kind != CLI_OPT_END; o++) {
			if (!is_positional(o))
				continue;
			opt_label(o, label, sizeof(label));
			printf("  %-*s  ", width, label);
			print_indented(o->help, width + 4);
		}
	}
	printf("\nOptions:\n");
	for (o = u->opts; o->kind != CLI_OPT_END; o++) {
		if (is_positional(o))
			continue;
		opt_label(o, label, sizeof(label));
		printf("  %-*s  ", width, label);
		print_indented(o->help, width + 4);
	}
	printf("  %-*s  show this help\n", width, "-h, --help");
	if (u->details)
		printf("\n%s\n", u->details);
	if (find_option(u, "json", 4))
		printf("\nWith --json, an error (usage errors too) prints {\"schema_version\":1,\"ok\":false,\n"
		       "\"error\":{\"code\",\"message\"}}, or ends a document already begun with\n"
		       "\"ok\":false,\"error\":{...}; code is \"usage\", a library error's name\n"
		       "(\"DVAR_ENOTFOUND\", \"DVAR_EIO\", ...) or \"runtime\".\n");
	printf("\nExit status: 0 success, ");
	if (u->check)
		printf("1 %s, ", u->check);
	printf("2 usage error, 3 runtime error.\n");
}

/* N >= 0 in decimal. */
static int parse_int(const char *s, int64_t *out)
{
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -1;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

/* "4096", "64K", "4MiB", "1g": a byte count with an optional binary suffix. */
static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned shift = 0;

	if (!isdigit((unsigned char)s[0]))
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	switch (tolower((unsigned char)*end)) {
	case 'k': shift = 10; end++; break;
	case 'm': shift = 20; end++; break;
	case 'g': shift = 30; end++; break;
	default: break;
	}
	if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end || (v << shift) >> shift != v)
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_real(const char *s, double *out)
{
	char *end;

	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0)
		return -1;
	*out = v;
	return 0;
}

static const cli_opt *find_option(const cli_usage *u, const char *name, size_t len)
{
	for (const cli_opt *o = u->opts; o->kind != CLI_OPT_END; o++)
		if (!is_positional(o) && strlen(o->name) == len && strncmp(o->name, name, len) == 0)
			return o;
	return NULL;
}

/* Store value (NULL for a switch) into o's target. */
static int set_option(const char *cmd, const cli_opt *o, const char *value)
{
	static const char *const what[] = {
		[CLI_OPT_INT] = "a whole number >= 0",
		[CLI_OPT_BYTES] = "a byte count (e.g. 4096, 64K, 4M)",
		[CLI_OPT_REAL] = "a finite number >= 0",
	};
	int bad = 0;

	switch (o->kind) {
	case CLI_OPT_SWITCH:
		*(int *)o->target = o->value;
		return 0;
	case CLI_OPT_STRING:
		*(const char **)o->target = value;
		return 0;
	case CLI_OPT_LIST: {
		cli_args *l = o->target;
		char **v = realloc(l->v, (size_t)(l->n + 1) * sizeof(*v));
		if (!v)
			return cli_error(cmd, "out of memory");
		v[l->n++] = (char *)value;
		l->v = v;
		return 0;
	}
	case CLI_OPT_INT:
		bad = parse_int(value, o->target);
		break;
	case CLI_OPT_BYTES:
		bad = parse_bytes(value, o->target);
		break;
	case CLI_OPT_REAL:
		bad = parse_real(value, o->target);
		break;
	default:
		break;
	}
	if (bad)
		return cli_usage_error(cmd, "--%s '%s': expected %s", o->name, value, what[o->kind]);
	return 0;
}

/* One "--name[=value]" at argv[*i]; may consume the next argument. */
static int parse_long(const cli_usage *u, const char *cmd, int argc, char **argv, int *i)
{
	const char *name = argv[*i] + 2;
	const char *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	const cli_opt *o = find_option(u, name, len);

	if (!o) {
		char typed[128], near[512];
		cli_suggest sg;
		snprintf(typed, sizeof(typed), "%.*s", (int)len, name);
		cli_suggest_init(&sg, typed);
		for (o = u->opts; o->kind != CLI_OPT_END; o++)
			if (!is_positional(o))
				cli_suggest_add(&sg, o->name, o->name);
		return cli_usage_error(cmd, "unknown option '--%s'%s", typed,
		                       cli_suggest_text(&sg, "--", near, sizeof(near)));
	}
	if (o->kind == CLI_OPT_SWITCH) {
		if (eq)
			return cli_usage_error(cmd, "--%s takes no value", o->name);
		return set_option(cmd, o, NULL);
	}
	const char *value = eq ? eq + 1 : NULL;
	if (!value) {
		if (*i + 1 >= argc)
			return cli_usage_error(cmd, "--%s needs a value (%s)", o->name, o->value_name);
		value = argv[++*i];
	}
	return set_option(cmd, o, value);
}

/* Hand the positionals, in order, to the table's CLI_OPT_ARG/ARGS entries. */
static int assign_positionals(const cli_usage *u, const char *cmd, char **pos, int npos)
{
	int next = 0;

	for (const cli_opt *o = u->opts; o->kind != CLI_OPT_END; o++) {
		if (!is_positional(o))
			continue;
		int avail = npos - next;
		if (avail == 0 && (o->flags & CLI_OPT_REQUIRED))
			return cli_usage_error(cmd, "missing %s", o->name);
		if (o->kind == CLI_OPT_ARG) {
			if (avail > 0)
				*(const char **)o->target = pos[next++];
		} else {
			cli_args *a = o->target;
			a->v = pos + next;
			a->n = avail;
			next = npos;
		}
	}
	if (next < npos)
		return cli_usage_error(cmd, "unexpected argument '%s'", pos[next]);
	return 0;
}

int cli_parse(const cli_usage *u, int argc, char **argv)
{
	const char *cmd = argv[0];
	int npos = 0, rc;

	/* --help wins over any mistake elsewhere on the line; --json makes even a
	 * usage error a JSON document. */
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			print_help(u, cmd);
			return CLI_EXIT_OK;
		}
		if (strcmp(argv[i], "--json") == 0 && find_option(u, "json", 4))
			cli_json_mode = 1;
	}
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			while (++i < argc)
				argv[1 + npos++] = argv[i];
			break;
		}
		if (a[0] == '-' && a[1] == '-') {
			if ((rc = parse_long(u, cmd, argc, argv, &i)) != 0)
				return rc;
		} else if (a[0] == '-' && a[1] != '\0') {
			return cli_usage_error(cmd, "unknown option '%s'", a);
		} else {
			/* Compact the positionals at the front; they never overtake i. */
			argv[1 + npos++] = a;
		}
	}
	if ((rc = assign_positionals(u, cmd, argv + 1, npos)) != 0)
		return rc;
	return CLI_CONTINUE;
}

int cli_parse_compress(const char *cmd, const char *text, dvar_compress *out)
{
	if (strcmp(text, "none") == 0)
		*out = DVAR_COMPRESS_NONE;
	else if (strcmp(text, "lz4") == 0)
		*out = DVAR_COMPRESS_LZ4;
	else if (strcmp(text, "auto") == 0)
		*out = DVAR_COMPRESS_AUTO;
	else
		return cli_usage_error(cmd, "--compress takes auto, lz4 or none, not '%s'", text);
	return 0;
}

int cli_check_chunk_size(const char *cmd, uint64_t bytes)
{
	if (bytes && (bytes % 4096 || bytes > (1u << 30)))
		return cli_usage_error(cmd, "--chunk-size must be a multiple of 4096 from 4096 to 1 GiB");
	return 0;
}
