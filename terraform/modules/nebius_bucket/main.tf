# A checkpoint bucket in Nebius Object Storage (S3-compatible): versioned, private (no bucket policy
# rule: no anonymous access, no group grant; the nodes use S3 access keys that the driver hands
# them, never Terraform), labelled, with lifecycle rules for incomplete uploads and old versions.
#
# The provider has no force_destroy and this module adds no lifecycle { prevent_destroy = true }:
# like gcp_bucket and aws_bucket, the bucket is kept by the storage root's lifecycle (`rlinfra down`
# leaves it, `rlinfra down --delete-buckets` empties it first and then destroys it).
# prevent_destroy cannot take a variable, so it would make --delete-buckets impossible without
# editing the module.

resource "nebius_storage_v1_bucket" "this" {
  parent_id = var.parent_id
  name      = var.name
  labels    = var.labels

  versioning_policy     = "ENABLED"
  default_storage_class = var.storage_class
  max_size_bytes        = var.max_size_bytes

  lifecycle_configuration = {
    rules = [
      {
        # Multipart uploads that never completed are removed after 7 days.
        id     = "abort-incomplete-multipart-uploads"
        status = "ENABLED"
        filter = { prefix = "" }
        abort_incomplete_multipart_upload = {
          days_after_initiation = 7
        }
      },
      {
        # Overwritten or deleted object versions are removed noncurrent_version_days after they
        # stopped being current; with 0 the rule is disabled and they are kept.
        id     = "expire-noncurrent-versions"
        status = var.noncurrent_version_days > 0 ? "ENABLED" : "DISABLED"
        filter = { prefix = "" }
        noncurrent_version_expiration = {
          noncurrent_days = max(var.noncurrent_version_days, 1)
        }
      },
    ]
  }
}
