// RUN: pkc-opt %s --split-input-file --verify-diagnostics

func.func @matmul_k_mismatch(%a: tensor<4x8xbf16>, %b: tensor<16x4xbf16>) -> tensor<4x4xbf16> {
  // expected-error @+1 {{'pk.matmul' contraction dims differ: lhs tensor<4x8xbf16> has K=8, rhs tensor<16x4xbf16> has K=16}}
  %c = pk.matmul %a, %b : (tensor<4x8xbf16>, tensor<16x4xbf16>) -> tensor<4x4xbf16>
  func.return %c : tensor<4x4xbf16>
}

// -----

func.func @matmul_dtype_mismatch(%a: tensor<4x8xbf16>, %b: tensor<8x4xf16>) -> tensor<4x4xbf16> {
  // expected-error @+1 {{'pk.matmul' operands need one float element type, got bf16 and f16}}
  %c = pk.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x4xf16>) -> tensor<4x4xbf16>
  func.return %c : tensor<4x4xbf16>
}

// -----

func.func @map_unknown_fn(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pk.map' unknown function "softplus"}}
  %c = pk.map "softplus" %a : (tensor<4xf32>) -> tensor<4xf32>
  func.return %c : tensor<4xf32>
}

// -----

func.func @map_no_broadcast(%a: tensor<4x3xf32>, %b: tensor<4xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'pk.map' operand shapes 4x3, 4 do not broadcast}}
  %c = pk.map "add" %a, %b : (tensor<4x3xf32>, tensor<4xf32>) -> tensor<4x3xf32>
  func.return %c : tensor<4x3xf32>
}

// -----

func.func @map_mixed_dtypes(%a: tensor<4xf32>, %b: tensor<4xbf16>) -> tensor<4xf32> {
  // expected-error @+1 {{needs operands of one element type, got f32, bf16 (insert a "cast")}}
  %c = pk.map "mul" %a, %b : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  func.return %c : tensor<4xf32>
}

// -----

func.func @all_gather_wrong_shape(%a: tensor<4x8xbf16>) -> tensor<8x8xbf16> {
  // expected-error @+1 {{'pk.all_gather' with world 4: result tensor<8x8xbf16> should be tensor<16x8xbf16>}}
  %c = pk.all_gather %a {dim = 0 : i64, world = 4 : i64} : tensor<4x8xbf16> -> tensor<8x8xbf16>
  func.return %c : tensor<8x8xbf16>
}

// -----

func.func @reduce_scatter_indivisible(%a: tensor<6x8xbf16>) -> tensor<1x8xbf16> {
  // expected-error @+1 {{'pk.reduce_scatter' dim 0 of size 6 is not divisible by world 4}}
  %c = pk.reduce_scatter %a {dim = 0 : i64, reduce = "sum", world = 4 : i64} : tensor<6x8xbf16> -> tensor<1x8xbf16>
  func.return %c : tensor<1x8xbf16>
}

// -----

func.func @all_reduce_bad_world(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pk.all_reduce' world size must be between 1 and 1024, got 0}}
  %c = pk.all_reduce %a {reduce = "sum", world = 0 : i64} : tensor<4xf32> -> tensor<4xf32>
  func.return %c : tensor<4xf32>
}

// -----

func.func @all_reduce_bad_op(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pk.all_reduce' unknown reduction "prod"}}
  %c = pk.all_reduce %a {reduce = "prod", world = 2 : i64} : tensor<4xf32> -> tensor<4xf32>
  func.return %c : tensor<4xf32>
}

// -----

func.func @reshape_numel(%a: tensor<4x8xf32>) -> tensor<5x8xf32> {
  // expected-error @+1 {{'pk.reshape' element count differs: tensor<4x8xf32> has 32, tensor<5x8xf32> has 40}}
  %c = pk.reshape %a : tensor<4x8xf32> -> tensor<5x8xf32>
  func.return %c : tensor<5x8xf32>
}

// -----

func.func @transpose_not_perm(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'pk.transpose' perm [1, 1] is not a permutation of rank 2}}
  %c = pk.transpose %a {perm = [1, 1]} : tensor<4x8xf32> -> tensor<8x4xf32>
  func.return %c : tensor<8x4xf32>
}

// -----

func.func @slice_out_of_range(%a: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'pk.slice' range [6:10:1] invalid for dimension 1 of size 8}}
  %c = pk.slice %a {dim = 1 : i64, start = 6 : i64, end = 10 : i64, step = 1 : i64} : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return %c : tensor<4x4xf32>
}

// -----

func.func @reduce_dim_range(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pk.reduce' dimension 2 is out of range for rank 2}}
  %c = pk.reduce "sum" %a {dims = [2]} : tensor<4x8xf32> -> tensor<4xf32>
  func.return %c : tensor<4xf32>
}

// -----

func.func @opaque_bad_spec(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pk.opaque' spec of aten::cumsum is not valid JSON}}
  %c = pk.opaque "aten::cumsum"(%a) {spec = "{args"} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %c : tensor<4xf32>
}

// -----

func.func @missing_terminator(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{pk.map terminates block in single-block region but is not a terminator}}
  %c = pk.map "neg" %a : (tensor<4xf32>) -> tensor<4xf32>
}
