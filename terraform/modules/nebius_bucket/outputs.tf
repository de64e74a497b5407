output "bucket" {
  description = "The bucket: name, id, the S3-compatible endpoint of its region, the region as S3 clients name it, and its domain name."
  value = {
    name        = nebius_storage_v1_bucket.this.name
    id          = nebius_storage_v1_bucket.this.id
    endpoint    = "https://storage.${nebius_storage_v1_bucket.this.status.region}.nebius.cloud"
    region      = nebius_storage_v1_bucket.this.status.region
    domain_name = nebius_storage_v1_bucket.this.status.domain_name
  }
}
