# Root rendered by rlinfra for the `local` cloud: built-in resources only, no providers.
terraform {
  required_version = ">= 1.5, < 2.0"
}
