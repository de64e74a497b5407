# GPU (or CPU) nodes for one Ray cluster: a security group that opens everything between members
# and only SSH plus the listed service ports to the allowed ranges, a key pair, a cluster
# placement group, an IAM role that reaches one bucket, and node_count instances.

locals {
  # Instance types that take an Elastic Fabric Adapter (checked by var.efa's validation). Keep in
  # step with efa: in driver/rlinfra/clouds/aws/catalog.yaml.
  efa_instance_types = [
    "p5.4xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "p4de.24xlarge",
    "g6e.8xlarge", "g6e.12xlarge", "g6e.16xlarge", "g6e.24xlarge", "g6e.48xlarge",
    "g6.8xlarge", "g6.12xlarge", "g6.16xlarge", "g6.24xlarge", "g6.48xlarge",
    "g5.8xlarge", "g5.12xlarge", "g5.16xlarge", "g5.24xlarge", "g5.48xlarge",
    "m7i.48xlarge", "c7i.48xlarge", "r7i.48xlarge",
  ]

  # GPU families (g*, p*) boot the AWS Deep Learning base image, everything else plain Ubuntu.
  images = {
    gpu = { owner = "amazon", name = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*" }
    cpu = { owner = "099720109477", name = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*" } # Canonical
  }
  image = local.images[can(regex("^[gp][0-9]", var.instance_type)) ? "gpu" : "cpu"]
  ami   = var.ami != null ? var.ami : data.aws_ami.this[0].id

  make_placement_group = var.placement_group && var.node_count > 1

  # SSH first, then each service port once.
  ports = distinct(concat([22], var.service_ports))

  bucket_arn = var.bucket_name == null ? null : "arn:${data.aws_partition.current.partition}:s3:::${var.bucket_name}"
}

data "aws_partition" "current" {}

data "aws_ami" "this" {
  count = var.ami == null ? 1 : 0

  most_recent = true
  owners      = [local.image.owner]

  filter {
    name   = "name"
    values = [local.image.name]
  }

  filter {
    name   = "architecture"
    values = ["x86_64"]
  }

  filter {
    name   = "virtualization-type"
    values = ["hvm"]
  }
}

# --- network access -------------------------------------------------------------------------------

# Rules are inline, so the group is authoritative: a rule added by hand is removed on the next apply.
resource "aws_security_group" "this" {
  #checkov:skip=CKV_AWS_24:SSH (22) is open to allowed_cidrs only, and a /0 range there is refused unless allow_public (variable validation); checkov cannot resolve the service_clients rules, which open their own port only.
  #checkov:skip=CKV_AWS_382:Nodes download packages, wheels, images and model weights from the internet and write to S3; outbound traffic is open, inbound is not.
  name        = var.cluster_name
  description = "rlinfra cluster ${var.cluster_name}: all traffic between members, SSH and service ports from allowed ranges only"
  vpc_id      = var.vpc_id

  ingress {
    description = "All traffic between cluster members (Ray GCS, object store, NCCL, EFA)"
    protocol    = "-1"
    from_port   = 0
    to_port     = 0
    self        = true
  }

  # SSH and each service port, from the allowed ranges only (none when allowed_cidrs is empty).
  dynamic "ingress" {
    for_each = length(var.allowed_cidrs) > 0 ? local.ports : []
    content {
      description = ingress.value == 22 ? "SSH from allowed ranges" : "Service port ${ingress.value} from allowed ranges"
      protocol    = "tcp"
      from_port   = ingress.value
      to_port     = ingress.value
      cidr_blocks = var.allowed_cidrs
    }
  }

  # One service port each for the clients named (other clusters), nothing else.
  dynamic "ingress" {
    for_each = var.service_clients
    content {
      description = "Service port ${ingress.value.port} from client networks"
      protocol    = "tcp"
      from_port   = ingress.value.port
      to_port     = ingress.value.port
      cidr_blocks = ingress.value.cidrs
    }
  }

  egress {
    description = "All outbound traffic (package mirrors, model hubs, S3)"
    protocol    = "-1"
    from_port   = 0
    to_port     = 0
    cidr_blocks = ["0.0.0.0/0"]
  }

  tags = merge(var.tags, { Name = var.cluster_name })
}

resource "aws_key_pair" "this" {
  key_name   = var.cluster_name
  public_key = trimspace(var.ssh_public_key)

  tags = merge(var.tags, { Name = var.cluster_name })
}

resource "aws_placement_group" "this" {
  count = local.make_placement_group ? 1 : 0

  name     = var.cluster_name
  strategy = "cluster"

  tags = merge(var.tags, { Name = var.cluster_name })
}

# --- identity: the nodes reach the checkpoint bucket and nothing else ------------------------------

resource "aws_iam_role" "this" {
  name_prefix = "${var.cluster_name}-"
  description = "Nodes of rlinfra cluster ${var.cluster_name}"

  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ec2.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })

  tags = merge(var.tags, { Name = var.cluster_name })
}

resource "aws_iam_role_policy" "bucket" {
  count = var.bucket_name == null ? 0 : 1

  name = "checkpoint-bucket"
  role = aws_iam_role.this.id

  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "ListCheckpointBucket"
        Effect   = "Allow"
        Action   = ["s3:ListBucket"]
        Resource = [local.bucket_arn]
      },
      {
        Sid      = "ReadWriteCheckpoints"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
        Resource = ["${local.bucket_arn}/*"]
      },
    ]
  })
}

resource "aws_iam_instance_profile" "this" {
  name_prefix = "${var.cluster_name}-"
  role        = aws_iam_role.this.name

  tags = merge(var.tags, { Name = var.cluster_name })
}

# --- nodes ----------------------------------------------------------------------------------------

# With EFA, each node's primary interface is an EFA made here and attached at launch.
resource "aws_network_interface" "efa" {
  count = var.efa ? var.node_count : 0

  description     = "EFA of ${var.cluster_name}-${count.index}"
  subnet_id       = var.subnet_id
  security_groups = [aws_security_group.this.id]
  interface_type  = "efa"

  tags = merge(var.tags, { Name = "${var.cluster_name}-${count.index}-efa" })
}

resource "aws_instance" "this" {
  count = var.node_count

  #checkov:skip=CKV_AWS_88:The controller reaches each node over SSH at its public address (public_ip = true); inbound is limited to SSH and service ports from allowed_cidrs by the security group.
  #checkov:skip=CKV_AWS_126:Detailed (1-minute) CloudWatch monitoring is opt-in through var.detailed_monitoring; GPU health is checked on the nodes themselves.
  ami                  = local.ami
  instance_type        = var.instance_type
  key_name             = aws_key_pair.this.key_name
  iam_instance_profile = aws_iam_instance_profile.this.name
  placement_group      = local.make_placement_group ? aws_placement_group.this[0].id : null
  ebs_optimized        = true
  monitoring           = var.detailed_monitoring

  # Without EFA the instance makes its own interface in the subnet; with EFA it takes the one above.
  subnet_id                   = var.efa ? null : var.subnet_id
  vpc_security_group_ids      = var.efa ? null : [aws_security_group.this.id]
  associate_public_ip_address = var.efa ? null : var.public_ip

  dynamic "network_interface" {
    for_each = var.efa ? [aws_network_interface.efa[count.index].id] : []
    content {
      device_index         = 0
      network_interface_id = network_interface.value
    }
  }

  dynamic "instance_market_options" {
    for_each = var.spot ? [1] : []
    content {
      market_type = "spot"
      spot_options {
        max_price                      = var.spot_max_price == null ? null : tostring(var.spot_max_price)
        instance_interruption_behavior = "terminate"
        spot_instance_type             = "one-time"
      }
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2 # containers on the node reach the instance role too
  }

  root_block_device {
    volume_size           = var.root_volume.size_gb
    volume_type           = var.root_volume.type
    iops                  = var.root_volume.iops
    throughput            = var.root_volume.throughput
    encrypted             = true
    delete_on_termination = true
    tags                  = merge(var.tags, { Name = "${var.cluster_name}-${count.index}-root" })
  }

  tags = merge(var.tags, {
    Name           = "${var.cluster_name}-${count.index}"
    "rlinfra:rank" = tostring(count.index)
  })

  lifecycle {
    # A newer image from the lookup must not replace running nodes; `terraform apply -replace`
    # (or a new deployment) moves a cluster to it.
    ignore_changes = [ami]
  }
}

# Public addresses of EFA nodes (an interface made before launch gets none by itself).
resource "aws_eip" "efa" {
  count = var.efa && var.public_ip ? var.node_count : 0

  domain            = "vpc"
  network_interface = aws_network_interface.efa[count.index].id

  tags = merge(var.tags, { Name = "${var.cluster_name}-${count.index}" })

  depends_on = [aws_instance.this]
}
