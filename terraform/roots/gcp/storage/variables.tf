variable "project" {
  description = "Google Cloud project of the buckets. null takes the provider's (GOOGLE_PROJECT and the like); rlinfra's `up` always sets it."
  type        = string
  default     = null

  validation {
    condition     = var.project == null || can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project must be null or a project id: 6 to 30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "region" {
  description = "Region of the buckets (their location), e.g. \"us-central1\": the cluster's, so checkpoints cross no region."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]{1,2}$", var.region))
    error_message = "region must be a Google Cloud region such as \"us-central1\" or \"europe-west4\"."
  }
}

variable "labels" {
  description = "Labels of every bucket, as provider default_labels and module labels (rlinfra-profile; managed-by = rlinfra is added)."
  type        = map(string)
  default     = {}
}

variable "buckets" {
  description = "Names of the buckets to create."
  type        = list(string)
}

variable "kms_key_name" {
  description = "Cloud KMS key for every bucket's default encryption; null keeps Google-managed keys."
  type        = string
  default     = null
}

variable "noncurrent_version_days" {
  description = "Days an overwritten object version is kept (0 keeps them forever)."
  type        = number
  default     = 30
}
