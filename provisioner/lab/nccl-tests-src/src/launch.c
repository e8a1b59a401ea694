/* Lab stand-in's program: all_reduce_perf as the ELF executable the real build leaves (ldd reads
 * it as it reads the real one), running the stand-in script beside it with the same arguments. */
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    (void)argc;
    argv[0] = SCRIPT;
    execv(SCRIPT, argv);
    perror(SCRIPT);
    return 127;
}
