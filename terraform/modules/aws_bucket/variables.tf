variable "name" {
  description = "Bucket name (globally unique): 3 to 63 lowercase letters, digits, dots and hyphens."
  type        = string

  validation {
    condition = (
      can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.name)) &&
      !can(regex("\\.\\.", var.name)) &&
      !can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}$", var.name)) &&
      !startswith(var.name, "xn--") && !startswith(var.name, "sthree-") &&
      !endswith(var.name, "-s3alias") && !endswith(var.name, "--ol-s3")
    )
    error_message = "name must be 3 to 63 characters of lowercase letters, digits, dots and hyphens, start and end with a letter or digit, have no \"..\", not look like an IP address, not start with \"xn--\" or \"sthree-\", and not end with \"-s3alias\" or \"--ol-s3\"."
  }
}

variable "encryption" {
  description = "Default server-side encryption: algorithm \"AES256\" (S3-managed keys) or \"aws:kms\" with an optional KMS key id or ARN (null uses the account's aws/s3 key)."
  type = object({
    algorithm  = optional(string, "AES256")
    kms_key_id = optional(string)
  })
  default = {}

  validation {
    condition     = contains(["AES256", "aws:kms"], var.encryption.algorithm)
    error_message = "encryption.algorithm must be one of: AES256, aws:kms."
  }

  validation {
    condition     = var.encryption.kms_key_id == null || var.encryption.algorithm == "aws:kms"
    error_message = "encryption.kms_key_id can only be set with encryption.algorithm = \"aws:kms\"."
  }
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept before S3 removes it (versioning keeps every checkpoint overwrite otherwise). 0 keeps them forever."
  type        = number
  default     = 30

  validation {
    condition     = floor(var.noncurrent_version_days) == var.noncurrent_version_days && var.noncurrent_version_days >= 0
    error_message = "noncurrent_version_days must be a whole number of days, 0 (keep forever) or more."
  }
}

variable "tags" {
  description = "Tags for the bucket (merged with a Name tag)."
  type        = map(string)
  default     = {}
}
