/* The least a request/answer server does on Linux, for bench/latency/floor.py.
 *
 *   floor <file> <write: 0|1>
 *
 * Listens on 127.0.0.1 (a free port, printed on stdout), and for each ready connection
 * reads what has arrived, cuts it into frames (a 4-byte big-endian size, then the body),
 * pwrite()s each body at the end of <file> when write is 1 (a log append), and sends one
 * 64-byte answer per frame. It runs until stdin closes. Its own work is a few hundred
 * instructions a request: the process's CPU time is the kernel's cost of the system
 * calls a request needs (epoll_wait, read, pwrite, send) and of the wakeups they cause.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUFFER_BYTES (1 << 20)
#define ANSWER_BYTES 64
#define MAX_FDS 1024

static char *pending[MAX_FDS];   /* unparsed bytes per connection */
static size_t pending_len[MAX_FDS];

static int listen_on_loopback(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof addr;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 16)
        || getsockname(fd, (struct sockaddr *)&addr, &len)) {
        perror("listen");
        exit(1);
    }
    printf("%d\n", ntohs(addr.sin_port));
    fflush(stdout);
    return fd;
}

/* Frames answered from what one read brought; the rest waits for the next read. */
static int answer_frames(int fd, int log_fd, int write, off_t *log_end) {
    size_t used = 0;
    int frames = 0;
    while (pending_len[fd] - used >= 4) {
        uint32_t size;
        memcpy(&size, pending[fd] + used, 4);
        size = ntohl(size);
        if (pending_len[fd] - used - 4 < size)
            break;
        if (write && pwrite(log_fd, pending[fd] + used + 4, size, *log_end) == (ssize_t)size)
            *log_end += size;
        used += 4 + size;
        frames++;
    }
    memmove(pending[fd], pending[fd] + used, pending_len[fd] - used);
    pending_len[fd] -= used;
    return frames;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: floor <file> <write: 0|1>\n");
        return 2;
    }
    int log_fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644), write = atoi(argv[2]), one = 1;
    off_t log_end = 0;
    int listener = listen_on_loopback(), poller = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    char answer[ANSWER_BYTES] = {0};
    uint32_t answer_size = htonl(ANSWER_BYTES - 4);
    memcpy(answer, &answer_size, 4);
    epoll_ctl(poller, EPOLL_CTL_ADD, listener, &event);
    event.data.fd = STDIN_FILENO;
    epoll_ctl(poller, EPOLL_CTL_ADD, STDIN_FILENO, &event);
    for (;;) {
        struct epoll_event ready[64];
        int count = epoll_wait(poller, ready, 64, -1);
        for (int i = 0; i < count; i++) {
            int fd = ready[i].data.fd;
            if (fd == STDIN_FILENO)
                return 0;   /* the bench is done */
            if (fd == listener) {
                int conn = accept(listener, NULL, NULL);
                if (conn < 0 || conn >= MAX_FDS)
                    continue;
                setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                pending[conn] = malloc(BUFFER_BYTES);
                pending_len[conn] = 0;
                event.data.fd = conn;
                epoll_ctl(poller, EPOLL_CTL_ADD, conn, &event);
                continue;
            }
            ssize_t got = read(fd, pending[fd] + pending_len[fd], BUFFER_BYTES - pending_len[fd]);
            if (got <= 0) {
                epoll_ctl(poller, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                free(pending[fd]);
                continue;
            }
            pending_len[fd] += (size_t)got;
            for (int frames = answer_frames(fd, log_fd, write, &log_end); frames > 0; frames--)
                send(fd, answer, sizeof answer, 0);
        }
    }
}
