# Storage root rendered by rlinfra for the `local` cloud. It is kept by `rlinfra down` and only
# destroyed by `rlinfra down --delete-buckets`.
terraform {
  required_version = ">= 1.5, < 2.0"
}
