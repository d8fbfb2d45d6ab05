/*
 * test_moe_cuda_compile.cc - the role loops compile as CUDA device code: nvcc
 * builds the persistent kernel (moe/cuda/kernel.cu), which calls every role
 * loop of moe/roles.h with the CUDA primitives and the expert FFN, for sm_80
 * and sm_90.  Compiled, not run; built only where configure found CUDA, with
 * the nvcc it found.
 */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

class MoeCuda : public ::testing::TestWithParam<const char *>
{
};

/* The architectures configure's --with-cuda-arch defaults to. */
INSTANTIATE_TEST_SUITE_P(Arch, MoeCuda, ::testing::Values("sm_80", "sm_90"));

TEST_P(MoeCuda, RoleLoopsCompileAsDeviceCode)
{
    std::string nvcc = NVCC_PATH;
    ASSERT_EQ(access(nvcc.c_str(), X_OK), 0) << "configure's nvcc " << nvcc << " is gone";
    std::string top = TOP_SRCDIR;
    char dir[] = "/tmp/incmoe_nvcc_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string out = std::string(dir) + "/kernel.ptx";
    std::string log = std::string(dir) + "/nvcc.log";
    std::string cmd = "'" + nvcc + "' -arch=" + GetParam() + " -std=c++17 -ptx -I'" + top +
                      "/moe' -I'" + top + "' -I'" + top + "/include' -I'" + TOP_BUILDDIR +
                      "/include/incmoe' '" + top + "/moe/cuda/kernel.cu' -o '" + out + "' > '" +
                      log + "' 2>&1";
    int rc = system(cmd.c_str());
    std::string text;
    if (FILE *f = fopen(log.c_str(), "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
            text.append(buf, n);
        fclose(f);
    }
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd << "\n" << text;
    /* The kernel is there, with the device waits and atomics of the primitives. */
    std::string ptx;
    if (FILE *f = fopen(out.c_str(), "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
            ptx.append(buf, n);
        fclose(f);
    }
    EXPECT_NE(ptx.find(".entry moe_roles_kernel"), std::string::npos);
    EXPECT_NE(ptx.find("nanosleep"), std::string::npos);
    EXPECT_NE(ptx.find("atom."), std::string::npos);
    EXPECT_NE(ptx.find("membar.sys"), std::string::npos) << "no system fence before a post";
    EXPECT_NE(ptx.find("wmma.mma"), std::string::npos) << "no tensor-core FFN";
    unlink(out.c_str());
    unlink(log.c_str());
    rmdir(dir);
}
