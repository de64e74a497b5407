variable "parent_id" {
  description = "Nebius project id (\"project-...\") of the buckets. Credentials come from the environment (NEBIUS_IAM_TOKEN), never from variables."
  type        = string

  validation {
    condition     = can(regex("^project-[a-z0-9]+$", var.parent_id))
    error_message = "parent_id must be a Nebius project id such as \"project-e00abc123def456\"."
  }
}

variable "region" {
  description = "Region of the project, e.g. \"eu-north1\": the buckets live there (the cluster's, so checkpoints cross no region)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}-[a-z]+[0-9]$", var.region))
    error_message = "region must be a Nebius region such as \"eu-north1\", \"eu-west1\" or \"us-central1\"."
  }
}

variable "labels" {
  description = "Labels of every bucket (rlinfra-profile; managed-by = rlinfra is added)."
  type        = map(string)
  default     = {}
}

variable "buckets" {
  description = "Names of the buckets to create."
  type        = list(string)
}

variable "storage_class" {
  description = "Default storage class of new objects (STANDARD or ENHANCED_THROUGHPUT)."
  type        = string
  default     = "STANDARD"
}

variable "noncurrent_version_days" {
  description = "Days an overwritten object version is kept (0 keeps them forever)."
  type        = number
  default     = 30
}
