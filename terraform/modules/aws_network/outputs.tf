output "network" {
  description = "The cluster's VPC and subnet, and the subnet's availability zone. Available once the subnet routes to the internet."
  value = {
    vpc_id            = local.create ? aws_vpc.this[0].id : data.aws_subnet.existing[0].vpc_id
    subnet_id         = local.create ? aws_subnet.this[0].id : data.aws_subnet.existing[0].id
    availability_zone = local.create ? aws_subnet.this[0].availability_zone : data.aws_subnet.existing[0].availability_zone
  }

  # Instances placed in the subnet must find the default route already there.
  depends_on = [aws_route.internet, aws_route_table_association.this]
}
