variable "name" {
  description = "Bucket name (globally unique): 3 to 63 lowercase letters, digits, dots, hyphens and underscores."
  type        = string

  validation {
    condition = (
      can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", var.name)) &&
      !can(regex("\\.\\.", var.name)) &&
      !can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}$", var.name)) &&
      !startswith(var.name, "goog") &&
      !can(regex("g[o0][o0]gle", var.name))
    )
    error_message = "name must be 3 to 63 characters of lowercase letters, digits, dots, hyphens and underscores, start and end with a letter or digit, have no \"..\", not look like an IP address, not start with \"goog\" and not contain \"google\" (or \"g00gle\")."
  }
}

variable "project" {
  description = "Project of the bucket. null takes the provider's project."
  type        = string
  default     = null

  validation {
    condition     = var.project == null || can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project must be null or a project id: 6 to 30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "location" {
  description = "Location of the bucket: a region such as \"us-central1\" (keep checkpoints in the cluster's region: no transfer charge, more throughput), a dual-region or a multi-region such as \"US\"."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z]+(-[A-Za-z]+[0-9]{1,2}|[0-9]*)$", var.location))
    error_message = "location must be a Cloud Storage location such as \"us-central1\", \"EUROPE-WEST4\", \"US\" or \"NAM4\"."
  }
}

variable "kms_key_name" {
  description = "Cloud KMS key that encrypts new objects by default (projects/P/locations/L/keyRings/R/cryptoKeys/K); Cloud Storage's service agent needs encrypt/decrypt on it. null keeps Google-managed encryption (no KMS permissions needed on the nodes)."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be null or \"projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY\"."
  }
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept before Cloud Storage removes it (versioning keeps every checkpoint overwrite otherwise). 0 keeps them forever."
  type        = number
  default     = 30

  validation {
    condition     = floor(var.noncurrent_version_days) == var.noncurrent_version_days && var.noncurrent_version_days >= 0
    error_message = "noncurrent_version_days must be a whole number of days, 0 (keep forever) or more."
  }
}

variable "object_admins" {
  description = "Service accounts that may list, read, write and delete objects in this bucket (roles/storage.objectAdmin on it, nothing else), by a key of your choice (keys must be known at plan time; emails may come from resources): { cluster = \"c1-nodes@p.iam.gserviceaccount.com\" }. For a cluster's own account prefer gcp_cluster's bucket_name, whose grant goes away with the cluster."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for key in keys(var.object_admins) : can(regex("^[a-z][a-z0-9_-]{0,62}$", key))])
    error_message = "object_admins keys must be 1 to 63 lowercase letters, digits, _ or -, starting with a letter."
  }

  validation {
    condition     = alltrue([for email in values(var.object_admins) : can(regex("^[a-z0-9][a-z0-9.-]{3,62}@[a-z0-9.-]+\\.gserviceaccount\\.com$", email))])
    error_message = "object_admins values must be service account emails such as \"c1-nodes@my-project.iam.gserviceaccount.com\" (no \"serviceAccount:\" prefix)."
  }
}

variable "labels" {
  description = "Labels of the bucket. Keys and values: lowercase letters, digits, _ and -."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for key, value in var.labels :
      can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))
    ])
    error_message = "labels must have keys of 1 to 63 lowercase letters, digits, _ or - starting with a letter, and values of up to 63 of the same characters (no ':' or '.')."
  }
}
