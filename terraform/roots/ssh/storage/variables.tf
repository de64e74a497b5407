variable "buckets" {
  description = "Names of the buckets to create."
  type        = list(string)
}

variable "bucket_root" {
  description = "Absolute folder that holds the local buckets."
  type        = string
}
