"""The operations the command line calls: prepare, review, up, check, status, endpoints, down,
run and recover. Each takes a plan or a cluster name and returns data; printing is the CLI's."""
