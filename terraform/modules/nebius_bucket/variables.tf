variable "name" {
  description = "Bucket name (unique in Object Storage, as S3 bucket names are): 3 to 63 lowercase letters, digits, dots and hyphens."
  type        = string

  validation {
    condition = (
      can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.name)) &&
      !can(regex("\\.\\.", var.name)) &&
      !can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}$", var.name))
    )
    error_message = "name must be 3 to 63 characters of lowercase letters, digits, dots and hyphens, start and end with a letter or digit, have no \"..\" and not look like an IP address."
  }
}

variable "parent_id" {
  description = "Nebius project id (\"project-...\") of the bucket; the bucket lives in the project's region."
  type        = string

  validation {
    condition     = can(regex("^project-[a-z0-9]+$", var.parent_id))
    error_message = "parent_id must be a Nebius project id such as \"project-e00abc123def456\"."
  }
}

variable "storage_class" {
  description = "Default storage class of new objects: STANDARD, or ENHANCED_THROUGHPUT for checkpoints read back by many nodes at once (priced higher)."
  type        = string
  default     = "STANDARD"

  validation {
    condition     = contains(["STANDARD", "ENHANCED_THROUGHPUT"], var.storage_class)
    error_message = "storage_class must be one of: STANDARD, ENHANCED_THROUGHPUT."
  }
}

variable "max_size_bytes" {
  description = "Most bytes the bucket may hold, a guard against a runaway checkpoint loop; null (or 0) is no limit beyond the project's quota."
  type        = number
  default     = null

  validation {
    condition     = var.max_size_bytes == null || try(floor(var.max_size_bytes) == var.max_size_bytes && var.max_size_bytes >= 0, false)
    error_message = "max_size_bytes must be null or a whole number of bytes, 0 or more."
  }
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept before Object Storage removes it (versioning keeps every checkpoint overwrite otherwise). 0 keeps them forever."
  type        = number
  default     = 30

  validation {
    condition     = floor(var.noncurrent_version_days) == var.noncurrent_version_days && var.noncurrent_version_days >= 0
    error_message = "noncurrent_version_days must be a whole number of days, 0 (keep forever) or more."
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
    error_message = "labels must have keys of 1 to 63 lowercase letters, digits, _ or - starting with a letter, and values of up to 63 of the same characters."
  }
}
