// tests/headertest.cc - the public headers compile as C++ (see headertest.c).
#include "dvar/dvar.h"

int main()
{
	dvar_shape s;
	return dvar_shape_init(&s, 0, nullptr) == DVAR_OK && dvar_strerror(DVAR_EIO)[0] ? 0 : 1;
}
