# A checkpoint bucket: private (public access blocked, ACLs off), versioned, encrypted at rest,
# never emptied by Terraform (force_destroy = false: destroying a bucket that holds objects fails).

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV_AWS_18:Access logs need a second bucket per deployment; the bucket holds training checkpoints reached only through the nodes' IAM role, and CloudTrail data events can be enabled per account.
  #checkov:skip=CKV_AWS_144:Cross-region replication doubles storage for checkpoints that can be recomputed; an operator who needs it adds it on the bucket.
  #checkov:skip=CKV_AWS_145:AES256 (S3-managed keys) is the default so that nodes need no KMS permissions; encryption.algorithm = "aws:kms" switches to KMS.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events; checkpoints are read by the training jobs that wrote them.
  bucket        = var.name
  force_destroy = false

  tags = merge(var.tags, { Name = var.name })
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket = aws_s3_bucket.this.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.encryption.algorithm == "aws:kms" ? "aws:kms" : "AES256"
      kms_master_key_id = var.encryption.kms_key_id
    }
    bucket_key_enabled = var.encryption.algorithm == "aws:kms"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    id     = "abort-incomplete-uploads"
    status = "Enabled"

    # Every object ("" is the whole bucket, spelled so that S3 and emulators read it back alike).
    filter {
      prefix = ""
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }

  rule {
    id     = "expire-noncurrent-versions"
    status = var.noncurrent_version_days > 0 ? "Enabled" : "Disabled"

    # Every object ("" is the whole bucket, spelled so that S3 and emulators read it back alike).
    filter {
      prefix = ""
    }

    noncurrent_version_expiration {
      noncurrent_days = max(var.noncurrent_version_days, 1)
    }
  }

  # Lifecycle rules on noncurrent versions need versioning switched on first.
  depends_on = [aws_s3_bucket_versioning.this]
}
