/* The floor under any stdio relay, for bench/witness_overhead.py: starts COMMAND on two pipes and copies both
 * directions, read then write, on two threads; reads nothing, keeps nothing. What a relay costs that does no
 * work of its own beyond the two extra pipe hops. */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

struct hop { int from, to; };

static void *copy(void *arg) {
    struct hop *hop = arg;
    static __thread char buf[1 << 20];
    ssize_t got;
    while ((got = read(hop->from, buf, sizeof buf)) > 0)
        for (char *at = buf; got > 0;) {
            ssize_t put = write(hop->to, at, (size_t)got);
            if (put <= 0) return NULL;
            at += put, got -= put;
        }
    close(hop->to);
    return NULL;
}

int main(int argc, char **argv) {
    int in[2], out[2], status = 0;
    if (argc < 2 || pipe(in) || pipe(out)) return 2;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0), dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    struct hop up = {0, in[1]}, down = {out[0], 1};
    pthread_t a, b;
    pthread_create(&a, NULL, copy, &up);
    pthread_create(&b, NULL, copy, &down);
    waitpid(pid, &status, 0);
    pthread_join(b, NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
