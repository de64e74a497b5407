variable "region" {
  description = "AWS region of the buckets, e.g. \"us-east-1\". Credentials come from the environment, never from variables."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]+$", var.region))
    error_message = "region must be an AWS region name such as \"us-east-1\" or \"eu-west-1\"."
  }
}

variable "endpoints" {
  description = "Service endpoint URLs by service (keys: ec2, s3, sts, iam), for an AWS API emulator. Empty uses AWS itself."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for service in keys(var.endpoints) : contains(["ec2", "s3", "sts", "iam"], service)])
    error_message = "endpoints keys must be among: ec2, s3, sts, iam."
  }

  validation {
    condition     = alltrue([for url in values(var.endpoints) : can(regex("^https?://", url))])
    error_message = "endpoints values must be URLs starting with http:// or https://."
  }
}

variable "max_retries" {
  description = "Most times the provider retries a failed API call."
  type        = number
  default     = 25

  validation {
    condition     = floor(var.max_retries) == var.max_retries && var.max_retries >= 0 && var.max_retries <= 100
    error_message = "max_retries must be a whole number from 0 to 100."
  }
}

variable "tags" {
  description = "Tags for every bucket, as provider default_tags and module tags (rlinfra:cluster, rlinfra:profile, managed-by = rlinfra)."
  type        = map(string)
  default     = {}
}

variable "buckets" {
  description = "Names of the buckets to create."
  type        = list(string)
}

variable "encryption" {
  description = "Default encryption of every bucket: algorithm AES256 or aws:kms, optional KMS key id."
  type = object({
    algorithm  = optional(string, "AES256")
    kms_key_id = optional(string)
  })
  default = {}
}

variable "noncurrent_version_days" {
  description = "Days an overwritten object version is kept (0 keeps them forever)."
  type        = number
  default     = 30
}
