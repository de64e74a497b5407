output "bucket" {
  description = "The local bucket: its name, its folder, and a file:// URL of that folder."
  value = {
    name = terraform_data.this.output.name
    path = terraform_data.this.output.path
    url  = "file://${terraform_data.this.output.path}"
  }
}
