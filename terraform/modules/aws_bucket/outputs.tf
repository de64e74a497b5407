output "bucket" {
  description = "The bucket: name, ARN and region."
  value = {
    name   = aws_s3_bucket.this.id
    arn    = aws_s3_bucket.this.arn
    region = aws_s3_bucket.this.region
  }

  # The bucket is reported once it is private, versioned and encrypted.
  depends_on = [
    aws_s3_bucket_public_access_block.this,
    aws_s3_bucket_ownership_controls.this,
    aws_s3_bucket_versioning.this,
    aws_s3_bucket_server_side_encryption_configuration.this,
  ]
}
