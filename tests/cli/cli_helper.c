/*
 * tests/cli/cli_helper.c - what test_cli.py needs from libdvar that the dvar
 * command does not do, as a program (so that it also runs against a
 * sanitized libdvar, which Python cannot load):
 *
 *   cli_helper write OUT SPEC [--compress none|lz4|auto] [--chunk-size N]
 *       write a checkpoint from a spec file of lines
 *           var NAME DTYPE DIMS      DIMS: "4,3", or "-" for a scalar
 *           slice SLICE FILE         SLICE: TF slice text ("0,2:-"), or "all";
 *                                    FILE: the slice's raw bytes
 *           attr KEY VALUE           VALUE: the rest of the line
 *           base BASE                a delta over BASE (first line only)
 *           unchanged                the variable is the base's
 *           rows IDS FILE            IDS: "3,7,9"; FILE: those rows' raw bytes
 *       (NAME may hold any bytes but spaces: %XX escapes one byte)
 *   cli_helper map CKPT NAME OUT [--verify]
 *       dvar_reader_map the whole variable, write its bytes to OUT and print
 *       "size <bytes> aligned <0|1>" (aligned: the pointer is 4096-aligned)
 *
 * Errors go to stderr as "cli_helper: <dvar message>", exit status 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dvar/dvar.h"

static int fail(const char *what)
{
	const dvar_error *e = dvar_error_last();
	fprintf(stderr, "cli_helper: %s: %s\n", what, e->message[0] ? e->message : dvar_strerror(e->code));
	return 1;
}

static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		unsigned v;
		if (s[0] == '%' && s[1] && s[2] && sscanf(s + 1, "%2x", &v) == 1) {
			*o++ = (char)v;
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

static void *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	void *buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static int cmd_write(int argc, char **argv)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	wo.flags = DVAR_WRITE_NO_FSYNC;
	for (int k = 4; k + 1 < argc; k += 2) {
		if (strcmp(argv[k], "--compress") == 0)
			wo.compress = strcmp(argv[k + 1], "none") == 0 ? DVAR_COMPRESS_NONE :
			              strcmp(argv[k + 1], "lz4") == 0 ? DVAR_COMPRESS_LZ4 : DVAR_COMPRESS_AUTO;
		else if (strcmp(argv[k], "--chunk-size") == 0)
			wo.chunk_size = strtoull(argv[k + 1], NULL, 10);
	}
	FILE *spec = fopen(argv[3], "r");
	if (!spec) {
		perror(argv[3]);
		return 1;
	}
	dvar_writer *w;
	if (dvar_writer_open(&w, argv[2], &wo) != DVAR_OK)
		return fail("open");
	char line[8192], name[4096] = "", word[4096], rest[4096];
	int dtype = 0, rc = 0;
	dvar_shape shape = { 0 };
	while (!rc && fgets(line, sizeof(line), spec)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "var ", 4) == 0) {
			char dt[64], dims[1024];
			int64_t d[DVAR_MAX_RANK];
			int rank = 0;
			dvar_dtype t;
			if (sscanf(line + 4, "%4095s %63s %1023s", name, dt, dims) != 3 ||
			    dvar_dtype_from_name(&t, dt) != DVAR_OK) {
				fprintf(stderr, "cli_helper: bad line '%s'\n", line);
				rc = 1;
				break;
			}
			unescape(name);
			dtype = (int)t;
			for (char *p = strcmp(dims, "-") ? strtok(dims, ",") : NULL; p; p = strtok(NULL, ","))
				d[rank++] = strtoll(p, NULL, 10);
			if (dvar_shape_init(&shape, rank, d) != DVAR_OK)
				rc = fail("shape");
		} else if (strncmp(line, "slice ", 6) == 0) {
			dvar_slice sl;
			size_t len;
			if (sscanf(line + 6, "%4095s %4095s", word, rest) != 2) {
				fprintf(stderr, "cli_helper: bad line '%s'\n", line);
				rc = 1;
				break;
			}
			void *data = read_file(rest, &len);
			if (!data) {
				perror(rest);
				rc = 1;
				break;
			}
			if (strcmp(word, "all") && dvar_slice_parse(&sl, word, &shape) != DVAR_OK)
				rc = fail("slice");
			else if (dvar_writer_add(w, name, dtype, &shape, strcmp(word, "all") ? &sl : NULL,
			                         data) != DVAR_OK)
				rc = fail("add");
			free(data);
		} else if (strncmp(line, "base ", 5) == 0) {
			if (dvar_writer_set_base(w, line + 5) != DVAR_OK)
				rc = fail("base");
		} else if (strcmp(line, "unchanged") == 0) {
			if (dvar_writer_add_unchanged(w, name, dtype, &shape) != DVAR_OK)
				rc = fail("unchanged");
		} else if (strncmp(line, "rows ", 5) == 0) {
			int64_t ids[1024];
			size_t n = 0, len;
			if (sscanf(line + 5, "%4095s %4095s", word, rest) != 2) {
				fprintf(stderr, "cli_helper: bad line '%s'\n", line);
				rc = 1;
				break;
			}
			for (char *p = strtok(word, ","); p && n < 1024; p = strtok(NULL, ","))
				ids[n++] = strtoll(p, NULL, 10);
			void *data = read_file(rest, &len);
			if (!data) {
				perror(rest);
				rc = 1;
				break;
			}
			if (dvar_writer_add_rows(w, name, dtype, &shape, ids, n, data) != DVAR_OK)
				rc = fail("rows");
			free(data);
		} else if (strncmp(line, "attr ", 5) == 0) {
			char *key = line + 5, *value = strchr(key, ' ');
			if (!value) {
				fprintf(stderr, "cli_helper: bad line '%s'\n", line);
				rc = 1;
				break;
			}
			*value++ = '\0';
			if (dvar_writer_set_attr(w, name, key, value) != DVAR_OK)
				rc = fail("attr");
		}
	}
	fclose(spec);
	if (!rc && dvar_writer_commit(w) != DVAR_OK)
		rc = fail("commit");
	dvar_writer_free(w);
	return rc;
}

static int cmd_map(int argc, char **argv)
{
	uint32_t flags = argc > 5 && strcmp(argv[5], "--verify") == 0 ? DVAR_MAP_VERIFY : 0;
	dvar_reader *r;
	dvar_mapping m;
	size_t i;
	int rc = 0;
	if (dvar_reader_open(&r, argv[2], NULL) != DVAR_OK)
		return fail("open");
	if (dvar_reader_find(r, argv[3], &i) != DVAR_OK) {
		rc = fail("find");
	} else if (dvar_reader_map(r, i, DVAR_MAP_WHOLE, flags, &m) != DVAR_OK) {
		rc = fail("map");
	} else {
		/* Read after the reader is gone: the mapping is the caller's. */
		dvar_reader_free(r);
		r = NULL;
		FILE *f = fopen(argv[4], "wb");
		if (!f || (m.size && fwrite(m.data, 1, (size_t)m.size, f) != m.size) || fclose(f) != 0) {
			perror(argv[4]);
			rc = 1;
		}
		printf("size %llu aligned %d\n", (unsigned long long)m.size,
		       m.size ? (uintptr_t)m.data % 4096 == 0 : 1);
		dvar_reader_unmap(&m);
	}
	dvar_reader_free(r);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "write") == 0)
		return cmd_write(argc, argv);
	if (argc >= 5 && strcmp(argv[1], "map") == 0)
		return cmd_map(argc, argv);
	fprintf(stderr, "usage: cli_helper write OUT SPEC [options] | map CKPT NAME OUT [--verify]\n");
	return 2;
}
