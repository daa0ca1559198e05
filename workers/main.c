/* main.c - placeholder until the worker lands (issue 3). */
#include <stdio.h>

#include "cairn.h"

int main(void)
{
	fprintf(stderr, "cairn-worker %s: not built yet\n", CAIRN_VERSION);
	return 1;
}
