package wiring_test

import "github.com/aws/aws-sdk-go-v2/aws"

func awsConfigForTest() aws.Config { return aws.Config{Region: "us-east-1"} }
