/* Rank i of the lower half and rank i + size/2 meet through MPI_Comm_join over a loopback TCP socket, and swap
 * their ranks over the new intercommunicator. Usage: mpi_comm_join [EXPECTED_SIZE] (an even size). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mpi_common.h"

static int loopback_socket(struct sockaddr_in *address)
{
    memset(address, 0, sizeof *address);
    address->sin_family = AF_INET;
    address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return socket(AF_INET, SOCK_STREAM, 0);
}

int main(int argc, char **argv)
{
    int rank, size;
    if (!mpi_test_start(&argc, &argv, "mpi_comm_join", &rank, &size))
        return 1;
    if (size < 2 || size % 2) {
        fprintf(stderr, "mpi_comm_join: needs an even number of ranks, has %d\n", size);
        return 1;
    }
    int half = size / 2, lower = rank < half;
    struct sockaddr_in address;
    int listener = -1, port = 0;
    if (lower) {
        socklen_t length = sizeof address;
        listener = loopback_socket(&address);
        if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) || listen(listener, 1) ||
            getsockname(listener, (struct sockaddr *)&address, &length)) {
            perror("mpi_comm_join: listen");
            return 1;
        }
        port = ntohs(address.sin_port);
    }
    int *ports = malloc(sizeof(int) * size);
    MPI_Allgather(&port, 1, MPI_INT, ports, 1, MPI_INT, MPI_COMM_WORLD);

    int fd = -1;
    if (lower) {
        fd = accept(listener, NULL, NULL);
    } else {
        fd = loopback_socket(&address);
        address.sin_port = htons((unsigned short)ports[rank - half]);
        if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address)) {
            perror("mpi_comm_join: connect");
            return 1;
        }
    }
    MPI_Comm inter;
    MPI_Comm_join(fd, &inter);
    int peer_rank = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, 0, 0, &peer_rank, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
    int expected = lower ? rank + half : rank - half;
    if (peer_rank != expected) {
        fprintf(stderr, "mpi_comm_join: rank %d joined rank %d, expected %d\n", rank, peer_rank, expected);
        return 1;
    }
    MPI_Comm_disconnect(&inter);
    close(fd);
    if (listener >= 0)
        close(listener);
    int joined = 1, pairs = 0;
    MPI_Reduce(&joined, &pairs, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_comm_join: %d ranks, %d pairs joined OK\n", size, pairs / 2);
    free(ports);
    MPI_Finalize();
    return 0;
}
