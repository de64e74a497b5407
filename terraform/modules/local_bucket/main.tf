# A local bucket: the folder <root>/<name>, which rclone addresses as an object store (remote type
# "local"). Nothing else is written into it, since every file there is an object. Destroy removes
# that folder and what it holds, and nothing else.

locals {
  path = "${trimsuffix(var.root, "/")}/${var.name}"
}

resource "terraform_data" "this" {
  triggers_replace = local.path

  input = {
    name = var.name
    path = local.path
  }

  provisioner "local-exec" {
    interpreter = ["bash", "-c"]
    command     = "set -euo pipefail; mkdir -p -- \"$RLINFRA_BUCKET_PATH\""
    environment = {
      RLINFRA_BUCKET_PATH = self.input.path
    }
  }

  provisioner "local-exec" {
    when        = destroy
    interpreter = ["bash", "-c"]
    command     = <<-EOT
      set -euo pipefail
      case "$RLINFRA_BUCKET_PATH" in
        /?*/?*) rm -rf -- "$RLINFRA_BUCKET_PATH" ;;
        *) echo "rlinfra local bucket: refusing to remove '$RLINFRA_BUCKET_PATH'" >&2; exit 1 ;;
      esac
    EOT
    environment = {
      RLINFRA_BUCKET_PATH = self.input.path
    }
  }
}
