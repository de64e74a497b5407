# A checkpoint bucket: private (uniform bucket-level access, public access prevention enforced),
# versioned, encrypted at rest (Google-managed keys, or a KMS key), labelled, and never emptied by
# Terraform: force_destroy = false, so destroying a bucket that still holds objects (or object
# versions) fails and the objects stay.
#
# There is deliberately no lifecycle { prevent_destroy = true }: like aws_bucket, the bucket is kept
# by the storage root's lifecycle (`rlinfra down` leaves it, `rlinfra down --delete-buckets` destroys
# it) and by force_destroy = false. prevent_destroy cannot take a variable, so it would make
# --delete-buckets impossible without editing the module, even for an empty bucket.

resource "google_storage_bucket" "this" {
  #checkov:skip=CKV_GCP_62:Usage logs need a second bucket per deployment; the bucket holds training checkpoints reached only through the nodes' service account, and Data Access audit logs can be enabled per project.
  project  = var.project
  name     = var.name
  location = var.location

  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  versioning {
    enabled = true
  }

  dynamic "encryption" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      default_kms_key_name = encryption.value
    }
  }

  # Multipart (XML API) uploads that never completed are removed after 7 days.
  lifecycle_rule {
    action {
      type = "AbortIncompleteMultipartUpload"
    }
    condition {
      age = 7
    }
  }

  # Overwritten or deleted object versions are removed noncurrent_version_days after they stopped
  # being current (no rule with 0: they are kept).
  dynamic "lifecycle_rule" {
    for_each = var.noncurrent_version_days > 0 ? [var.noncurrent_version_days] : []
    content {
      action {
        type = "Delete"
      }
      condition {
        with_state                 = "ARCHIVED"
        days_since_noncurrent_time = lifecycle_rule.value
      }
    }
  }

  labels = var.labels
}

resource "google_storage_bucket_iam_member" "object_admin" {
  for_each = var.object_admins

  bucket = google_storage_bucket.this.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${each.value}"
}
