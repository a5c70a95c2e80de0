module kvatlas.dev/kvatlas

go 1.19
