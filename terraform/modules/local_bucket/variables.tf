variable "name" {
  description = "Bucket name, with S3's rules: 3-63 characters of lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit."
  type        = string

  validation {
    condition = (
      can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.name)) &&
      !strcontains(var.name, "..") &&
      !can(regex("^[0-9]+(\\.[0-9]+){3}$", var.name))
    )
    error_message = "name must be 3-63 characters of lowercase letters, digits, dots and hyphens, start and end with a letter or digit, have no \"..\" and not look like an IPv4 address."
  }
}

variable "root" {
  description = "Absolute path of the folder that holds local buckets; the bucket is the folder \"<root>/<name>\"."
  type        = string

  validation {
    condition     = can(regex("^/[^[:space:]]*$", var.root)) && !can(regex("(^|/)\\.\\.(/|$)", var.root))
    error_message = "root must be an absolute path (starting with \"/\") without whitespace or \"..\" parts."
  }
}
