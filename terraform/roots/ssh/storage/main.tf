module "bucket" {
  source   = "./modules/local_bucket"
  for_each = toset(var.buckets)

  name = each.value
  root = var.bucket_root
}
