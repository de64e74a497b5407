output "bucket" {
  description = "The bucket: name, gs:// URL, self link and location."
  value = {
    name      = google_storage_bucket.this.name
    url       = google_storage_bucket.this.url
    self_link = google_storage_bucket.this.self_link
    location  = google_storage_bucket.this.location
  }

  # The bucket is reported once the grants on it exist.
  depends_on = [google_storage_bucket_iam_member.object_admin]
}
