module github.com/deepgo-ml/deepgo

go 1.26

require github.com/hjson/hjson-go/v4 v4.6.0 // indirect
