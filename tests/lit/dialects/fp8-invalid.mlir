// RUN: pkc-opt %s --split-input-file --verify-diagnostics

func.func @both_e5m2(%a: tensor<4x8xf8E5M2>, %b: tensor<8x4xf8E5M2>, %s: tensor<1xf32>) -> tensor<4x4xbf16> {
  // expected-error @+1 {{'pk.scaled_matmul' of two f8E5M2 operands is not supported}}
  %c = pk.scaled_matmul %a, %b scales(%s, %s) : (tensor<4x8xf8E5M2>, tensor<8x4xf8E5M2>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x4xbf16>
  func.return %c : tensor<4x4xbf16>
}

// -----

func.func @column_scale_for_lhs(%a: tensor<4x8xf8E4M3FN>, %b: tensor<8x4xf8E4M3FN>, %sa: tensor<1x8xf32>, %s: tensor<1xf32>) -> tensor<4x4xbf16> {
  // expected-error @+1 {{'pk.scaled_matmul' lhs scale must be f32 of shape 1 or 4x1 (tensor-wise or row-wise), got tensor<1x8xf32>}}
  %c = pk.scaled_matmul %a, %b scales(%sa, %s) : (tensor<4x8xf8E4M3FN>, tensor<8x4xf8E4M3FN>, tensor<1x8xf32>, tensor<1xf32>) -> tensor<4x4xbf16>
  func.return %c : tensor<4x4xbf16>
}

// -----

func.func @bf16_operands(%a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>, %s: tensor<1xf32>) -> tensor<4x4xbf16> {
  // expected-error @+1 {{'pk.scaled_matmul' operands must be f8E4M3FN or f8E5M2, got bf16 and bf16}}
  %c = pk.scaled_matmul %a, %b scales(%s, %s) : (tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x4xbf16>
  func.return %c : tensor<4x4xbf16>
}

// -----

func.func @fp8_result(%a: tensor<4x8xf8E4M3FN>, %b: tensor<8x4xf8E4M3FN>, %s: tensor<1xf32>) -> tensor<4x4xf8E4M3FN> {
  // expected-error @+1 {{'pk.scaled_matmul' result must be bf16, f16 or f32, got f8E4M3FN}}
  %c = pk.scaled_matmul %a, %b scales(%s, %s) : (tensor<4x8xf8E4M3FN>, tensor<8x4xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x4xf8E4M3FN>
  func.return %c : tensor<4x4xf8E4M3FN>
}

// -----

func.func @fp8_sum(%a: tensor<4x8xf8E4M3FN>) -> tensor<4x8xf8E4M3FN> {
  // expected-error @+1 {{'pk.all_reduce' operand #0 has element type f8E4M3FN, an 8-bit float, which only ops that move data}}
  %c = pk.all_reduce %a {reduce = "sum", world = 2 : i64} : tensor<4x8xf8E4M3FN> -> tensor<4x8xf8E4M3FN>
  func.return %c : tensor<4x8xf8E4M3FN>
}

// -----

func.func @fp8_add(%a: tensor<4x8xf8E4M3FN>) -> tensor<4x8xf8E4M3FN> {
  // expected-error @+1 {{'pk.map' operand #0 has element type f8E4M3FN, an 8-bit float}}
  %c = pk.map "add" %a, %a : (tensor<4x8xf8E4M3FN>, tensor<4x8xf8E4M3FN>) -> tensor<4x8xf8E4M3FN>
  func.return %c : tensor<4x8xf8E4M3FN>
}
