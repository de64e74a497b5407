# Storage root rendered by rlinfra for the `ssh` cloud: local buckets, folders of this machine
# that the hosts see through a shared filesystem. It is kept by `rlinfra down` and only
# destroyed by `rlinfra down --delete-buckets`.
terraform {
  required_version = ">= 1.5, < 2.0"
}
