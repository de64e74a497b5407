terraform {
  # 1.9 is the first release whose variable validations may refer to other variables and locals
  # (allowed_cidrs checks allow_public; efa checks instance_type).
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}
