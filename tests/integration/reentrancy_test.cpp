// SPDX-License-Identifier: Apache-2.0
#include "zk_test.hpp"
