# A private, versioned checkpoint bucket:
#
#   terraform init && terraform apply -var project=my-project -var name=my-checkpoints-1234
#   terraform destroy -var project=my-project -var name=my-checkpoints-1234   # fails while it holds objects

terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.50"
    }
  }
}

variable "project" {
  description = "Project of the bucket."
  type        = string
}

variable "location" {
  description = "Location of the bucket."
  type        = string
  default     = "us-central1"
}

variable "name" {
  description = "Globally unique bucket name."
  type        = string
}

variable "object_admins" {
  description = "Service accounts that may use the bucket's objects, by key."
  type        = map(string)
  default     = {}
}

provider "google" {
  project = var.project

  default_labels = { "managed-by" = "rlinfra" }
}

module "bucket" {
  source = "../.."

  name          = var.name
  location      = var.location
  object_admins = var.object_admins
  labels        = { "managed-by" = "rlinfra" }
}

output "bucket" {
  description = "Name, gs:// URL, self link and location of the bucket."
  value       = module.bucket.bucket
}
