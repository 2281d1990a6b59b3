/* The test cluster's pause container: holds the pod's namespaces, reaps
 * orphans, exits on SIGINT or SIGTERM. Built static by scripts/kube-up.sh,
 * so that its image is this one file. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void down(int sig) { _exit(0); }

static void reap(int sig)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sigaction d = {.sa_handler = down};
	struct sigaction r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};

	sigaction(SIGINT, &d, NULL);
	sigaction(SIGTERM, &d, NULL);
	sigaction(SIGCHLD, &r, NULL);
	for (;;)
		pause();
}
