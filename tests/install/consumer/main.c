/* Writes and reads back one scalar through an installed libdvar. */
#include <stdio.h>
#include <dvar/dvar.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	dvar_writer *w;
	dvar_reader *r;
	dvar_shape s;
	float x = 42.5f, y = 0;
	dvar_shape_init(&s, 0, NULL);
	if (dvar_writer_open(&w, argv[1], NULL) || dvar_writer_add(w, "x", DVAR_FLOAT32, &s, NULL, &x) ||
	    dvar_writer_commit(w) || (dvar_writer_free(w), 0) || dvar_reader_open(&r, argv[1], NULL) ||
	    dvar_reader_read(r, 0, NULL, &y, sizeof(y))) {
		fprintf(stderr, "%s\n", dvar_error_last()->message);
		return 1;
	}
	dvar_reader_free(r);
	printf("x = %g\n", y);
	return y == x ? 0 : 1;
}
